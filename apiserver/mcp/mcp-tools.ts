import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js"
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js"
import { z } from "zod"
import { notFound, RunnelError, shuttingDown } from "../../lib/core/errors.ts"
import type { OutputStream } from "../../lib/core/run.ts"
import { runStatuses } from "../../lib/core/status.ts"
import type { ResourceClient } from "../../lib/kube/resource-client.ts"
import type { PipelineObject, RunObject } from "../../lib/kube/resources.ts"
import type { LogStore } from "../../lib/logs/log-store.ts"
import type { AccessPolicy } from "../access.ts"
import { anonymousUser, type RequestUser } from "../auth/user.ts"
import { findPipeline, isResourceName } from "../find-pipeline.ts"
import { decideGate, type GateDecisionDeps, gateView } from "../gate-decision.ts"
import { admitRun, type NewRunDeps, refuseIfPaused } from "../new-run.ts"
import type { ResourceIndex } from "../resource-index.ts"
import { gatePipeline } from "../route-access.ts"
import { stopRun } from "../stop-run.ts"
import { pageEnvelope, paginate, pipelineView, runView, taskRecords, taskView } from "../views.ts"

export type McpToolDeps = NewRunDeps &
  GateDecisionDeps & {
    resources: Pick<ResourceClient, "getRun" | "getPipeline" | "patchRun" | "createRun">
    index: Pick<ResourceIndex, "pipelines" | "runs">
    logs: Pick<LogStore, "tasks" | "outputPage" | "search" | "attach">
    /** The driver of a pipeline stored without one. */
    defaultDriver: string
    /** `--mcp-allow-actions`: trigger_pipeline and stop_run exist only then, and approve_gate and reject_gate with `gates`. */
    allowActions: boolean
    /** The enabled feature names. */
    features: readonly string[]
    /** What each user may see: the one decision REST asks too. */
    policy: Pick<AccessPolicy, "mayView" | "check">
    /** True once the process shuts down: trigger_pipeline then answers 503, as REST does. */
    draining?: () => boolean
  }

/** Characters of each stream get_run_task returns when no `limit` is given. */
const defaultPageChars = 100_000
const maxPageChars = 1_000_000
/** The end of each stream list_run_tasks shows: enough to see why a task failed. */
const tailChars = 2_000
/** How much output get_task_output reads at a time while it scans. */
const scanChars = 1 << 20
/** Longer queries are refused: no log line needs more words to be found. */
const maxQueryChars = 1_000

/** The user of the request a server answers, and what they may see. */
type Access = {
  user: RequestUser
  actor: string
  mayView(pipeline: PipelineObject | undefined): boolean
  /** A 403 with the policy's reason when the user may not see it. */
  check(pipeline: PipelineObject | undefined): void
}

const runId = z
  .string()
  .min(1)
  .describe('A run id, as list_runs or search_tasks give it, for example "run-mfa3k2-1a2b3c4d".')
const taskPath = z
  .string()
  .min(1)
  .describe(
    'A task path inside the run, as list_run_tasks gives it: "tasks/<n>/<name>" for script pipelines (n counts tasks from 1), "pipeline/console" for a script\'s own console output, "jobs/<job>/<n>/<step_kind>/<name>" for YAML pipelines.',
  )
const pipelineKey = z.string().min(1).describe("A pipeline's name or id, as list_pipelines gives them.")
const page = z.number().int().min(1).default(1).describe("Page number, from 1.")
const perPage = z.number().int().min(1).max(100).default(20).describe("Items per page, 1 to 100.")

/**
 * Registers the tools on a server, which then answers one request at a time: `bind` names the user of
 * the next request (what they may see) and how its failures become messages. Building a server and its
 * tools costs milliseconds, so servers are reused rather than made per request.
 */
export function registerTools(server: McpServer, deps: McpToolDeps) {
  // Until a request binds its user: nothing is visible.
  let access: Access = { user: anonymousUser, actor: "", mayView: () => false, check: () => {} }
  let reads = accessReads(deps, access)
  let fail: (error: unknown) => string = () => "no request is bound to this server"
  const names: string[] = []
  const tool = <Shape extends z.ZodRawShape>(
    name: string,
    description: string,
    inputSchema: Shape,
    handler: (args: z.infer<z.ZodObject<Shape>>) => Promise<unknown>,
    readOnly = true,
  ) => {
    names.push(name)
    server.registerTool(
      name,
      { description, inputSchema, annotations: { readOnlyHint: readOnly, openWorldHint: false } },
      // biome-ignore lint/suspicious/noExplicitAny: the SDK's callback type is generic over the shape; args is checked by zod.
      (async (args: any): Promise<CallToolResult> => {
        try {
          return { content: [{ type: "text", text: JSON.stringify(await handler(args)) }] }
        } catch (error) {
          return { isError: true, content: [{ type: "text", text: JSON.stringify({ error: fail(error) }) }] }
        }
      }) as never,
    )
  }

  tool(
    "get_run",
    "One run of a pipeline: its status (queued, running, success, failure = the pipeline or a task failed, error = runnel could not run it, aborted), exit code, error_message, trigger and times. Use list_run_tasks next to see its tasks.",
    { run_id: runId },
    async ({ run_id }) => reads.runView(await reads.run(run_id)),
  )

  tool(
    "list_run_tasks",
    `The tasks of a run in the order they started: path, name, status, exit code, times, and the last ${tailChars} characters of stdout and stderr (the *_total_chars fields give the full length; get_run_task or get_task_output read the rest). Secret values appear as ***REDACTED***.`,
    { run_id: runId },
    async ({ run_id }) => {
      const run = await reads.run(run_id)
      const id = run.metadata?.name ?? ""
      return Promise.all(
        taskRecords(run, deps.logs).map(async (task) => {
          const [stdout, stderr] = await Promise.all([tail(id, task.path, "stdout"), tail(id, task.path, "stderr")])
          return {
            ...taskView(task, stdout.text, stderr.text),
            stdout_total_chars: stdout.total,
            stderr_total_chars: stderr.total,
          }
        }),
      )
    },
  )

  tool(
    "get_run_task",
    `One task of a run with its output. Output is paged in characters: stdout and stderr each from \`offset\` (default 0), at most \`limit\` characters (default ${defaultPageChars}, at most ${maxPageChars}); stdout_total_chars and stderr_total_chars give the full lengths, and next_offset is the offset of the next page, or null when both streams are read to the end. A 200 MB log is read page by page this way; get_task_output finds lines without reading it all.`,
    {
      run_id: runId,
      path: taskPath,
      offset: z.number().int().min(0).default(0).describe("First character of each stream to return, from 0."),
      limit: z
        .number()
        .int()
        .min(1)
        .max(maxPageChars)
        .default(defaultPageChars)
        .describe("Characters of each stream to return at most."),
    },
    async ({ run_id, path, offset, limit }) => {
      const { run, task } = await reads.task(run_id, path)
      const id = run.metadata?.name ?? ""
      const [stdout, stderr] = await Promise.all([
        deps.logs.outputPage(id, task.path, "stdout", offset, limit),
        deps.logs.outputPage(id, task.path, "stderr", offset, limit),
      ])
      const end = offset + limit
      return {
        ...taskView(task, stdout.text, stderr.text),
        offset,
        limit,
        stdout_total_chars: stdout.total,
        stderr_total_chars: stderr.total,
        next_offset: end < Math.max(stdout.total, stderr.total) ? end : null,
      }
    },
  )

  tool(
    "search_tasks",
    "Full-text search over task output (stdout and stderr of every task): best match first when at most 1,000 rows of output match, newest first when more do (then narrow with more words, run_id or pipeline_id). `query` is plain words, all of which must occur (punctuation and search operators are ignored; no wildcards). Give `run_id` to search one run, `pipeline_id` to search the runs of one pipeline (its matching runs by id, status or error message come too, as `runs`), or neither to search everything you may see. Each item names the run, pipeline, task path and stream, with a snippet in which the matched words are «marked»; read the task with get_run_task or get_task_output. Pages with `page` and `per_page`; has_next says whether another page exists.",
    {
      query: z.string().max(maxQueryChars).describe("Words to find, for example: connection refused"),
      run_id: runId.optional(),
      pipeline_id: pipelineKey.optional(),
      page,
      per_page: perPage,
    },
    async ({ query, run_id, pipeline_id, page, per_page }) => {
      if (run_id !== undefined && pipeline_id !== undefined) {
        throw new RunnelError(400, "bad_request", "give run_id or pipeline_id, not both")
      }
      const scope = run_id !== undefined ? { runIds: [(await reads.run(run_id)).metadata?.name ?? ""] } : undefined
      const pipeline = pipeline_id === undefined ? undefined : await reads.pipeline(pipeline_id)
      const pipelineRuns = pipeline === undefined ? undefined : reads.runsOf(pipeline)
      const { hits, hasMore } = await deps.logs.search({
        query,
        ...(scope ?? (pipelineRuns !== undefined ? { runIds: pipelineRuns.map(nameOf) } : reads.hiddenRuns())),
        offset: (page - 1) * per_page,
        limit: per_page,
      })
      const items = hits.flatMap((hit) => {
        const run = deps.index.runs.get(hit.runId)
        // Output of a run this server no longer knows (deleted) is not shown, as GET /api/runs/:id would not show it.
        if (run === undefined || !reads.mayViewRun(run)) return []
        const view = reads.runView(run)
        const { runId, ...rest } = hit
        return [{ run_id: runId, pipeline_id: view.pipeline_id, pipeline_name: view.pipeline_name, ...rest }]
      })
      const words = query.toLowerCase().trim()
      const runs =
        pipelineRuns === undefined || words === ""
          ? undefined
          : pipelineRuns
              .map(reads.runView)
              .filter((run) =>
                [run.id, run.status, run.error_message ?? ""].some((field) => field.toLowerCase().includes(words)),
              )
              .slice(0, 20)
      return { page, per_page, has_next: hasMore, items, ...(runs === undefined ? {} : { runs }) }
    },
  )

  tool(
    "search_pipelines",
    "Pipelines whose name or source contains every word of `query` (case-insensitive; an empty query lists all), by name, as a page of {id, name, driver}. get_pipeline shows one with its source.",
    {
      query: z
        .string()
        .max(maxQueryChars)
        .default("")
        .describe('Words to find in names and sources, for example "deploy"; "" for all.'),
      page,
      per_page: perPage,
    },
    async ({ query, page, per_page }) => {
      const words = query
        .toLowerCase()
        .split(/\s+/)
        .filter((word) => word !== "")
      const found = reads
        .pipelines()
        .filter((pipeline) => {
          const text = `${pipeline.metadata?.name ?? ""}\n${pipeline.spec.content}`.toLowerCase()
          return words.every((word) => text.includes(word))
        })
        .map((pipeline) => {
          const { id, name, driver } = reads.pipelineView(pipeline)
          return { id, name, driver }
        })
      return paginate(found, { page, perPage: per_page })
    },
  )

  tool(
    "list_runs",
    `Runs, newest first, as a page: filter by \`pipeline\` (name or id), \`status\` (${runStatuses.join(", ")}) and \`since\` (an ISO 8601 time: runs created then or later). "Why did the last deploy fail?" is list_runs with pipeline "deploy" and status "failure", then list_run_tasks.`,
    {
      pipeline: pipelineKey.optional(),
      status: z.enum(runStatuses).optional().describe("Only runs with this status."),
      since: z.iso
        .datetime({ offset: true })
        .optional()
        .describe("Only runs created at or after this time, for example 2026-01-31T00:00:00Z."),
      page,
      per_page: perPage,
    },
    async ({ pipeline, status, since, page, per_page }) => {
      const name = pipeline === undefined ? undefined : nameOf(await reads.pipeline(pipeline))
      const sinceMs = since === undefined ? undefined : Date.parse(since)
      const offset = (page - 1) * per_page
      const fast = sinceMs === undefined && reads.hiddenPipelines().length === 0
      if (fast) {
        const { items, total } = deps.index.runs.page({ status, pipeline: name }, offset, per_page)
        return pageEnvelope(items.map(reads.runView), total, { page, perPage: per_page })
      }
      const all = deps.index.runs
        .page({ status, pipeline: name }, 0, Number.MAX_SAFE_INTEGER)
        .items.filter(
          (run) =>
            reads.mayViewRun(run) &&
            (sinceMs === undefined || Date.parse(String(run.metadata?.creationTimestamp ?? "")) >= sinceMs),
        )
      return paginate(all.map(reads.runView), { page, perPage: per_page })
    },
  )

  tool(
    "list_pipelines",
    "Pipelines by name, as a page: id, name, source (content, content_type ts, js or yaml), driver, paused, rbac_expression, has_webhook_secret and times.",
    { page, per_page: perPage },
    async ({ page, per_page }) => paginate(reads.pipelines().map(reads.pipelineView), { page, perPage: per_page }),
  )

  tool(
    "get_pipeline",
    "One pipeline by name or id, with its source (content) and settings.",
    { pipeline: pipelineKey },
    async ({ pipeline }) => reads.pipelineView(await reads.pipeline(pipeline)),
  )

  tool(
    "get_task_output",
    "Lines of one task's output that contain `pattern` (plain text, not a regular expression; case-insensitive unless ignore_case is false), each with its line number and `context` lines before and after, like grep -n -C. Use it to find the error in a long log without reading all of it.",
    {
      run_id: runId,
      path: taskPath,
      pattern: z.string().min(1).max(maxQueryChars).describe("Text a line must contain, for example: error"),
      stream: z.enum(["stdout", "stderr", "both"]).default("both").describe("Which output to search."),
      context: z.number().int().min(0).max(20).default(2).describe("Lines shown before and after each match."),
      ignore_case: z.boolean().default(true),
      max_matches: z.number().int().min(1).max(1000).default(100).describe("Stop after this many matching lines."),
    },
    async ({ run_id, path, pattern, stream, context, ignore_case, max_matches }) => {
      const { run, task } = await reads.task(run_id, path)
      const streams: OutputStream[] = stream === "both" ? ["stdout", "stderr"] : [stream]
      const result: Record<string, unknown> = { run_id: nameOf(run), path: task.path }
      for (const name of streams) {
        result[name] = await grep(nameOf(run), task.path, name, pattern, {
          context,
          ignoreCase: ignore_case,
          maxMatches: max_matches,
        })
      }
      return result
    },
  )

  if (deps.allowActions) {
    tool(
      "trigger_pipeline",
      "Starts a run of a pipeline (as POST /api/pipelines/:id/trigger) and answers its run_id at once; follow it with get_run. Refused while the pipeline is paused (409) or the queue is full (503).",
      {
        pipeline: pipelineKey,
        args: z
          .array(z.string())
          .max(100)
          .default([])
          .describe("Arguments the pipeline receives as pipelineContext.args."),
      },
      async ({ pipeline, args }) => {
        if (deps.draining?.() === true) throw shuttingDown()
        const found = await reads.pipeline(pipeline)
        refuseIfPaused(found)
        const run = await admitRun(deps, found, {
          type: args.length > 0 ? "args" : "manual",
          args,
          by: access.actor,
        })
        deps.audit({
          event: "run.trigger",
          pipeline: nameOf(found),
          pipeline_id: found.metadata?.uid ?? "",
          actor: access.actor,
          run: nameOf(run),
          via: "mcp",
        })
        return { run_id: nameOf(run) }
      },
      false,
    )
    tool(
      "stop_run",
      "Stops a queued or running run (its containers are killed; status aborted) and answers the run. Refused (409) for a run that has finished.",
      { run_id: runId },
      async ({ run_id }) => {
        const run = await reads.run(run_id)
        const stopped = await stopRun(deps, run)
        const pipeline = deps.index.pipelines.get(run.spec.pipelineRef.name)
        deps.audit({
          event: "run.stop",
          pipeline: run.spec.pipelineRef.name,
          pipeline_id: pipeline?.metadata?.uid ?? "",
          actor: access.actor,
          run: nameOf(run),
          via: "mcp",
        })
        return reads.runView(stopped)
      },
      false,
    )
  }

  if (deps.allowActions && deps.features.includes("gates")) {
    for (const phase of ["approved", "rejected"] as const) {
      const [name, effect] =
        phase === "approved"
          ? ["approve_gate", "the run goes on past it"]
          : ["reject_gate", "the pipeline sees the gate fail (a script's pipeline.gate throws, a YAML gate step fails)"]
      tool(
        name,
        `Decides a gate a run waits on: ${effect}. Answers the gate: id, run_id, name, status (approved, rejected; pending if the run has not taken the decision yet), resolved_by, comment. A waiting run's output names its gate: 'waiting for approval of gate "<name>" (id <gate_id>)'; get_task_output with pattern "waiting for approval" finds it. Refused when the gate's approvers rule does not match you, and when it is already decided or its run has ended.`,
        {
          gate_id: z
            .string()
            .min(1)
            .describe("The gate's id, as the run's output names it, for example \"run-mfa3k2-1a2b3c4d-gate-1\"."),
          comment: z.string().optional().describe("Why, recorded with the decision."),
        },
        async ({ gate_id, comment }) => {
          const gate = isResourceName(gate_id) ? await deps.resources.getGate(gate_id) : undefined
          if (gate === undefined) throw notFound("gate", gate_id, "the waiting run's output names its gate")
          // REST's decision: the pipeline's rbac_expression, then the gate's approvers.
          deps.policy.check(access.user, { pipeline: gatePipeline(deps.index, gate), decide: gate })
          const decision = { phase, by: access.actor, ...(comment === undefined || comment === "" ? {} : { comment }) }
          return gateView(await decideGate(deps, gate, decision, "mcp"))
        },
        false,
      )
    }
  }

  return {
    names,
    bind(user: RequestUser, failure: (error: unknown) => string) {
      access = {
        user,
        actor: user.actor,
        mayView: (pipeline) => deps.policy.mayView(user, pipeline),
        check: (pipeline) => deps.policy.check(user, { pipeline }),
      }
      reads = accessReads(deps, access)
      fail = failure
    },
  }

  /** The last tailChars of a stream, and its length. */
  async function tail(id: string, path: string, stream: OutputStream) {
    const { total } = await deps.logs.outputPage(id, path, stream, 0, 0)
    return deps.logs.outputPage(id, path, stream, Math.max(0, total - tailChars), tailChars)
  }

  /** grep -n -C over a stream read a page at a time, so that a long log is never held whole. */
  async function grep(
    id: string,
    path: string,
    stream: OutputStream,
    pattern: string,
    options: { context: number; ignoreCase: boolean; maxMatches: number },
  ) {
    const needle = options.ignoreCase ? pattern.toLowerCase() : pattern
    const matches: { line: number; text: string; before: string[]; after: string[] }[] = []
    const recent: string[] = []
    const waiting: { after: string[] }[] = []
    let lineNumber = 0
    let partial = ""
    let truncated = false
    const take = (line: string) => {
      lineNumber++
      for (const match of waiting.splice(0)) {
        match.after.push(line)
        if (match.after.length < options.context) waiting.push(match)
      }
      if (matches.length < options.maxMatches && (options.ignoreCase ? line.toLowerCase() : line).includes(needle)) {
        const match = { line: lineNumber, text: line, before: recent.slice(-options.context), after: [] as string[] }
        matches.push(match)
        if (options.context > 0) waiting.push(match)
      } else if (matches.length >= options.maxMatches && waiting.length === 0) {
        truncated = true
      }
      recent.push(line)
      if (recent.length > options.context) recent.shift()
    }
    for (let offset = 0; !truncated; offset += scanChars) {
      const { text, total } = await deps.logs.outputPage(id, path, stream, offset, scanChars)
      const lines = (partial + text).split("\n")
      partial = lines.pop() ?? ""
      for (const line of lines) if (!truncated) take(line)
      if (offset + scanChars >= total) break
    }
    if (partial !== "" && !truncated) take(partial)
    return { matches, truncated }
  }
}

const nameOf = (object: { metadata?: { name?: string } }) => object.metadata?.name ?? ""

/** The reads of one request, each asking `access` what the user may see. */
function accessReads(deps: McpToolDeps, access: Access) {
  // Built once per request, on first use: a page of runs needs it for every run.
  let ids: Map<string, string> | undefined
  const pipelineIds = () => {
    ids ??= new Map(deps.index.pipelines.list().map((p) => [nameOf(p), p.metadata?.uid ?? ""]))
    return ids
  }
  const pipelineOf = (run: RunObject) => deps.index.pipelines.get(run.spec.pipelineRef.name)
  const mayViewRun = (run: RunObject) => access.mayView(pipelineOf(run))
  const hiddenPipelines = () => deps.index.pipelines.list().filter((pipeline) => !access.mayView(pipeline))
  const runsOf = (pipeline: PipelineObject) =>
    deps.index.runs.page({ pipeline: nameOf(pipeline) }, 0, Number.MAX_SAFE_INTEGER).items
  return {
    mayViewRun,
    hiddenPipelines,
    runsOf,
    /** The runs a search must leave out: those of pipelines the user may not see. */
    hiddenRuns: () => {
      const hidden = hiddenPipelines()
      return hidden.length === 0 ? {} : { exceptRunIds: hidden.flatMap(runsOf).map(nameOf) }
    },
    pipelines: () =>
      deps.index.pipelines
        .list()
        .filter((pipeline) => access.mayView(pipeline))
        .sort((a, b) => nameOf(a).localeCompare(nameOf(b))),
    pipelineView: (pipeline: PipelineObject) => pipelineView(pipeline, deps.defaultDriver),
    runView: (run: RunObject) => runView(run, pipelineIds()),
    async pipeline(key: string): Promise<PipelineObject> {
      const pipeline = await findPipeline(deps.resources, deps.index.pipelines, key)
      if (pipeline === undefined) throw notFound("pipeline", key, "list_pipelines or search_pipelines give the names")
      access.check(pipeline)
      return pipeline
    },
    async run(id: string): Promise<RunObject> {
      const run = isResourceName(id) ? await deps.resources.getRun(id) : undefined
      if (run === undefined) throw notFound("run", id, "list_runs or search_tasks give run ids")
      access.check(pipelineOf(run))
      return run
    },
    async task(id: string, path: string) {
      const run = await this.run(id)
      const task = taskRecords(run, deps.logs).find((task) => task.path === path)
      if (task === undefined) throw notFound("task", path, `list_run_tasks with run_id "${id}" gives its task paths`)
      return { run, task }
    },
  }
}
