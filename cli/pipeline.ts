import { readFile } from "node:fs/promises"
import { basename, extname } from "node:path"
import { parseKeyValues } from "../lib/config/flags.ts"
import { badRequest, errorMessage, SystemError } from "../lib/core/errors.ts"
import type { ApiClient } from "./api-client.ts"

const contentTypes: Record<string, string> = {
  ".ts": "ts",
  ".mts": "ts",
  ".js": "js",
  ".mjs": "js",
  ".yaml": "yaml",
  ".yml": "yaml",
}

// `runnel pipeline ...`: the client commands of contract.md section 3, over the REST API. cli/program.ts
// registers them (their options and --help) and loads this module when one runs.

/** `pipeline set FILE`: stores a pipeline file (PUT /api/pipelines/:name). */
export async function setPipeline(api: ApiClient, file: string, options: Readonly<Record<string, unknown>>) {
  const body = await pipelineBody(file, options)
  const name = typeof options.name === "string" ? options.name : basename(file, extname(file))
  const answer = await api.call("PUT", `/api/pipelines/${encodeURIComponent(name)}`, body)
  process.stdout.write(`pipeline "${name}" ${answer.status === 201 ? "created" : "updated"}\n`)
  const { notes } = answer.body as { notes?: unknown }
  if (Array.isArray(notes)) for (const note of notes) process.stderr.write(`note: ${String(note)}\n`)
}

/** `pipeline trigger NAME`: starts a run and prints its id, without waiting for it. */
export async function triggerPipeline(api: ApiClient, name: string, args: readonly string[]) {
  const answer = await api.call("POST", `/api/pipelines/${encodeURIComponent(name)}/trigger`, {
    mode: args.length > 0 ? "args" : "manual",
    args,
  })
  process.stdout.write(`${(answer.body as { run_id: string }).run_id}\n`)
}

/** `pipeline ls`: the stored pipelines as a table, or as JSON. */
export async function listPipelines(api: ApiClient, json: boolean) {
  const pipelines = await listAll(api)
  if (json) {
    process.stdout.write(`${JSON.stringify(pipelines, null, 2)}\n`)
    return
  }
  process.stdout.write(
    table([
      ["NAME", "TYPE", "DRIVER", "PAUSED", "UPDATED"],
      ...pipelines.map((p) => [p.name, p.content_type, p.driver, p.paused ? "yes" : "no", p.updated_at]),
    ]),
  )
}

/** `pipeline rm|pause|unpause NAME`. */
export async function changePipeline(api: ApiClient, action: "rm" | "pause" | "unpause", name: string) {
  const path = `/api/pipelines/${encodeURIComponent(name)}`
  if (action === "rm") await api.call("DELETE", path)
  else await api.call("POST", `${path}/${action}`)
  process.stdout.write(`pipeline "${name}" ${action === "rm" ? "removed" : `${action}d`}\n`)
}

type ScheduleRow = {
  id: string
  name: string
  schedule_type: string
  schedule_expr: string
  job_name: string
  enabled: boolean
  last_run_at: string | null
  next_run_at: string | null
}

/** `pipeline schedule ls NAME`: the pipeline's schedules as a table, or as JSON. */
export async function listSchedules(api: ApiClient, name: string, json: boolean) {
  const schedules = await schedulesOf(api, name)
  if (json) {
    process.stdout.write(`${JSON.stringify(schedules, null, 2)}\n`)
    return
  }
  process.stdout.write(
    table([
      ["NAME", "JOB", "TYPE", "EXPRESSION", "ENABLED", "LAST RUN", "NEXT RUN"],
      ...schedules.map((s) => [
        s.name,
        s.job_name === "" ? "-" : s.job_name,
        s.schedule_type,
        s.schedule_expr,
        s.enabled ? "yes" : "no",
        s.last_run_at ?? "-",
        s.next_run_at ?? "-",
      ]),
    ]),
  )
}

/**
 * `pipeline schedule pause|unpause NAME SCHEDULE`: SCHEDULE is the schedule's
 * name, its id, or the job it runs (the name a YAML author knows).
 */
export async function enableSchedule(api: ApiClient, action: "pause" | "unpause", name: string, key: string) {
  const schedules = await schedulesOf(api, name)
  const schedule =
    schedules.find((s) => s.name === key || s.id === key) ??
    schedules.find((s) => s.job_name !== "" && s.job_name === key)
  if (schedule === undefined) {
    const known = schedules.map((s) => s.name).join(", ")
    throw badRequest(`pipeline "${name}" has no schedule "${key}"; its schedules: ${known === "" ? "none" : known}`)
  }
  await api.call("PUT", `/api/schedules/${encodeURIComponent(schedule.id)}/enabled`, { enabled: action === "unpause" })
  process.stdout.write(`schedule "${schedule.name}" of pipeline "${name}" ${action}d\n`)
}

async function schedulesOf(api: ApiClient, name: string): Promise<ScheduleRow[]> {
  return (await api.call("GET", `/api/pipelines/${encodeURIComponent(name)}/schedules`)).body as ScheduleRow[]
}

/** Streams a new run's output to stdout and stderr; answers the run's exit code (130 when detached). */
export async function runPipeline(
  api: ApiClient,
  name: string,
  args: readonly string[],
  globalSecrets: Readonly<Record<string, string>>,
): Promise<number> {
  const detach = new AbortController()
  const onInterrupt = () => detach.abort()
  process.once("SIGINT", onInterrupt)
  let runPath: string | undefined
  try {
    const body = {
      args,
      trigger_type: "cli",
      ...(Object.keys(globalSecrets).length > 0 ? { global_secrets: globalSecrets } : {}),
    }
    const events = api.events(
      "POST",
      `/api/pipelines/${encodeURIComponent(name)}/run`,
      body,
      detach.signal,
      (headers) => {
        runPath = headers.location
      },
    )
    for await (const event of events) {
      const { stream, data, event: kind, code, message } = event as Record<string, unknown>
      if (stream === "stdout" || stream === "stderr") {
        await write(stream === "stdout" ? process.stdout : process.stderr, String(data))
      } else if (kind === "error") {
        await write(process.stderr, `runnel: ${String(message)}\n`)
      } else if (kind === "exit") {
        return typeof code === "number" ? code : 1
      }
    }
    if (detach.signal.aborted) {
      const runId = runPath?.split("/").pop()
      process.stderr.write(
        runId === undefined
          ? `runnel: detached; the run goes on on the server. Find it with GET ${api.url}/api/runs?pipeline_id=${encodeURIComponent(name)} and stop it with POST ${api.url}/api/runs/<id>/stop\n`
          : `runnel: detached; run ${runId} goes on on the server. Follow it with GET ${api.url}${runPath}/events, stop it with POST ${api.url}${runPath}/stop\n`,
      )
      return 130
    }
    throw new SystemError(
      `the event stream from ${api.url} ended before the run finished; see GET ${api.url}/api/runs?pipeline_id=${encodeURIComponent(name)}`,
    )
  } finally {
    process.off("SIGINT", onInterrupt)
  }
}

function write(stream: NodeJS.WriteStream, text: string): Promise<void> {
  return new Promise((resolve) => {
    if (stream.write(text)) resolve()
    else stream.once("drain", () => resolve())
  })
}

type PipelineRow = { name: string; content_type: string; driver: string; paused: boolean; updated_at: string }

async function listAll(api: ApiClient): Promise<PipelineRow[]> {
  const rows: PipelineRow[] = []
  for (let page = 1; ; page++) {
    const body = (await api.call("GET", `/api/pipelines?page=${page}&per_page=100`)).body as {
      items: PipelineRow[]
      has_next: boolean
    }
    rows.push(...body.items)
    if (!body.has_next) return rows
  }
}

async function pipelineBody(file: string, flags: Readonly<Record<string, unknown>>): Promise<Record<string, unknown>> {
  let content: string
  try {
    content = await readFile(file, "utf8")
  } catch (error) {
    throw badRequest(`cannot read pipeline file "${file}": ${errorMessage(error)}`)
  }
  const body: Record<string, unknown> = { content }
  const contentType = contentTypes[extname(file).toLowerCase()]
  if (contentType !== undefined) body.content_type = contentType
  if (typeof flags.driver === "string") body.driver = flags.driver
  if (typeof flags.rbac === "string") body.rbac_expression = flags.rbac
  if (typeof flags.webhookSecret === "string") body.webhook_secret = flags.webhookSecret
  const secrets = parseKeyValues((flags.secret as string[] | undefined) ?? [], "secret")
  if (Object.keys(secrets).length > 0) body.secrets = secrets
  const driverConfig = flags.driverConfig
  if (typeof driverConfig === "string") {
    let parsed: unknown
    try {
      parsed = JSON.parse(driverConfig)
    } catch (error) {
      throw badRequest(`--driver-config is not valid JSON (${errorMessage(error)}); write it as '{"host": "..."}'`)
    }
    if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
      throw badRequest(`--driver-config must be a JSON object, for example '{"host": "..."}'`)
    }
    body.driver_config = parsed
  }
  return body
}

export function table(rows: readonly (readonly string[])[]): string {
  const widths = rows[0]?.map((_, column) => Math.max(...rows.map((row) => (row[column] ?? "").length))) ?? []
  return rows
    .map((row) =>
      row
        .map((cell, column) => (column === row.length - 1 ? cell : cell.padEnd(widths[column] ?? 0)))
        .join("  ")
        .trimEnd(),
    )
    .map((line) => `${line}\n`)
    .join("")
}
