import { badRequest } from "../lib/core/errors.ts"
import type { PipelineObject, RunObject, ScheduleObject } from "../lib/kube/resources.ts"
import type { LogStore } from "../lib/logs/log-store.ts"
import { contentTypeOf } from "../lib/script/content-type.ts"
import type { ResourceIndex, RunFilter } from "./resource-index.ts"

/** Set on every write through this API: Kubernetes objects carry no update time of their own. */
export const updatedAtAnnotation = "runnel.dev/updated-at"

/** The pipeline object of contract.md section 4. The webhook secret itself is never in it. */
export function pipelineView(pipeline: PipelineObject, defaultDriver: string) {
  const { metadata = {}, spec } = pipeline
  const created = String(metadata.creationTimestamp ?? "")
  return {
    id: metadata.uid ?? "",
    name: metadata.name ?? "",
    content: spec.content,
    content_type: contentTypeOf(spec),
    driver: spec.driver ?? defaultDriver,
    driver_config: spec.driverConfig ?? {},
    rbac_expression: spec.rbacExpression ?? null,
    has_webhook_secret: spec.webhookSecretRef !== undefined,
    paused: spec.paused === true,
    created_at: created,
    updated_at: metadata.annotations?.[updatedAtAnnotation] ?? created,
  }
}

/** The run object of contract.md section 4; `pipelineIds` maps pipeline names to ids. */
export function runView(run: RunObject, pipelineIds: ReadonlyMap<string, string>) {
  const { metadata = {}, spec, status = {} } = run
  const created = String(metadata.creationTimestamp ?? "")
  const owner = metadata.ownerReferences?.find((reference) => reference.kind === "Pipeline")
  return {
    id: metadata.name ?? "",
    pipeline_id: pipelineIds.get(spec.pipelineRef.name) ?? owner?.uid ?? null,
    pipeline_name: spec.pipelineRef.name,
    status: status.phase ?? "queued",
    code: status.code ?? null,
    trigger_type: spec.trigger?.type ?? "manual",
    triggered_by: spec.trigger?.by ?? null,
    args: spec.trigger?.args ?? [],
    error_message: status.message === undefined || status.message === "" ? null : status.message,
    created_at: created,
    updated_at: status.finishedAt ?? status.startedAt ?? created,
    started_at: status.startedAt ?? null,
    finished_at: status.finishedAt ?? null,
  }
}

/** A run's tasks without their output: from its status, or from the log store while the status has none yet. */
export function taskRecords(run: RunObject, logs: Pick<LogStore, "tasks">) {
  const fromStatus = run.status?.tasks ?? []
  if (fromStatus.length > 0) return fromStatus
  return logs.tasks(run.metadata?.name ?? "").map(({ path, name, status, code, startedAt, endedAt }) => ({
    path,
    name,
    status,
    code,
    startedAt,
    endedAt,
  }))
}

/** The task object of contract.md section 4 around its output (already redacted when it was stored). */
export function taskView(task: ReturnType<typeof taskRecords>[number], stdout: string, stderr: string) {
  return {
    path: task.path,
    name: task.name,
    status: task.status,
    code: task.code,
    stdout,
    stderr,
    started_at: task.startedAt,
    ended_at: task.endedAt,
  }
}

export type Page = { page: number; perPage: number }

/** `?page=` (from 1) and `?per_page=` (1 to 100, default 20); anything else is a 400 saying so. */
export function pageOf(query: Record<string, string | string[] | undefined>): Page {
  const number = (name: string, fallback: number, max: number) => {
    const text = query[name]
    if (text === undefined) return fallback
    const value = typeof text === "string" && /^\d+$/.test(text) ? Number(text) : Number.NaN
    if (!Number.isSafeInteger(value) || value < 1 || value > max) {
      throw badRequest(
        `?${name}=${String(text)} is not valid; ${name} is a whole number from 1${max === Number.MAX_SAFE_INTEGER ? "" : ` to ${max}`}`,
      )
    }
    return value
  }
  return { page: number("page", 1, Number.MAX_SAFE_INTEGER), perPage: number("per_page", 20, 100) }
}

/** The paginated envelope of contract.md section 4 around the items of one page. */
export function pageEnvelope<T>(items: readonly T[], totalItems: number, { page, perPage }: Page) {
  const totalPages = Math.ceil(totalItems / perPage)
  return {
    items,
    page,
    per_page: perPage,
    total_items: totalItems,
    total_pages: totalPages,
    has_next: page < totalPages,
  }
}

/** One page of `items` in its envelope. */
export const paginate = <T>(items: readonly T[], page: Page) =>
  pageEnvelope(items.slice((page.page - 1) * page.perPage, page.page * page.perPage), items.length, page)

/** A query parameter given once, as a string; a repeated one is a 400. */
export function queryString(query: Record<string, string | string[] | undefined>, name: string): string | undefined {
  const value = query[name]
  if (Array.isArray(value)) throw badRequest(`?${name} is given ${value.length} times; give it once`)
  return value
}

/** The schedule object of interface.md ("Schedule"), plus its time zone and args; `pipelineId` is its pipeline's id. */
export function scheduleView(schedule: ScheduleObject, pipelineId: string) {
  const { metadata = {}, spec, status = {} } = schedule
  const created = String(metadata.creationTimestamp ?? "")
  return {
    id: metadata.uid ?? "",
    pipeline_id: pipelineId,
    name: metadata.name ?? "",
    schedule_type: spec.type,
    schedule_expr: spec.expression,
    job_name: spec.jobName ?? "",
    time_zone: spec.type === "cron" ? spec.timeZone || "UTC" : null,
    args: spec.args ?? [],
    enabled: spec.enabled !== false,
    last_run_at: status.lastRunAt ?? null,
    next_run_at: status.nextRunAt ?? null,
    created_at: created,
    updated_at: metadata.annotations?.[updatedAtAnnotation] ?? created,
  }
}

/**
 * A page of the runs a user may see, newest first: those of the pipelines
 * `visible` admits (a run whose pipeline is gone stays visible, as its own
 * path does). With nothing hidden it is the index's own page, without a walk.
 */
export function visibleRuns(
  index: Pick<ResourceIndex, "pipelines" | "runs">,
  visible: (pipeline: PipelineObject) => boolean,
  filter: RunFilter,
  offset: number,
  count: number,
): { items: RunObject[]; total: number } {
  const hidden = new Set(
    index.pipelines
      .list()
      .filter((pipeline) => !visible(pipeline))
      .map((pipeline) => pipeline.metadata?.name ?? ""),
  )
  if (hidden.size === 0) return index.runs.page(filter, offset, count)
  const all = index.runs
    .page(filter, 0, Number.MAX_SAFE_INTEGER)
    .items.filter((run) => !hidden.has(run.spec.pipelineRef.name))
  return { items: all.slice(offset, offset + count), total: all.length }
}
