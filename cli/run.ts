import { badRequest, SystemError } from "../lib/core/errors.ts"
import { isFinalRunStatus } from "../lib/core/status.ts"
import type { ApiClient } from "./api-client.ts"
import { table } from "./pipeline.ts"
import { TerminalObserver } from "./terminal-observer.ts"

// `runnel run ...`: the runs of a server in the terminal, the same views as the web UI's run pages, over
// the same REST API and event stream. cli/program.ts registers the commands and loads this module.

type RunRow = {
  id: string
  pipeline_name: string
  status: string
  code: number | null
  trigger_type: string
  triggered_by: string | null
  created_at: string
  started_at: string | null
  finished_at: string | null
}

type TaskRow = {
  path: string
  status: string
  code: number | null
  started_at: string | null
  ended_at: string | null
}

/** How many runs `run ls` shows: the newest page of GET /api/runs at its largest. */
const listed = 100

/** `run ls [--pipeline NAME] [--status S]`: the newest runs, as a table or as JSON. */
export async function listRuns(api: ApiClient, filter: { pipeline?: string; status?: string }, json: boolean) {
  const query = new URLSearchParams({ per_page: String(listed) })
  if (filter.pipeline !== undefined) query.set("pipeline_id", filter.pipeline)
  if (filter.status !== undefined) query.set("status", filter.status)
  const page = (await api.call("GET", `/api/runs?${query}`)).body as { items: RunRow[]; total_items: number }
  if (json) {
    process.stdout.write(`${JSON.stringify(page.items, null, 2)}\n`)
    return
  }
  if (page.items.length === 0) {
    process.stdout.write("no runs match\n")
    return
  }
  process.stdout.write(
    table([
      ["ID", "PIPELINE", "STATUS", "CODE", "TRIGGER", "CREATED", "DURATION"],
      ...page.items.map((run) => [
        run.id,
        run.pipeline_name,
        run.status,
        run.code === null ? "-" : String(run.code),
        run.triggered_by === null ? run.trigger_type : `${run.trigger_type} by ${run.triggered_by}`,
        run.created_at,
        duration(run.started_at, run.finished_at),
      ]),
    ]),
  )
  if (page.total_items > page.items.length) {
    process.stderr.write(
      `showing the newest ${page.items.length} of ${page.total_items} runs; narrow with --pipeline or --status\n`,
    )
  }
}

/** `run tasks RUN`: the run's tasks in start order, without their output. */
export async function listTasks(api: ApiClient, run: string, json: boolean) {
  const tasks = (await api.call("GET", `/api/runs/${encodeURIComponent(run)}/tasks?output=false`)).body as TaskRow[]
  if (json) {
    process.stdout.write(`${JSON.stringify(tasks, null, 2)}\n`)
    return
  }
  if (tasks.length === 0) {
    process.stdout.write(`run ${run} has no tasks yet\n`)
    return
  }
  process.stdout.write(
    table([
      ["PATH", "STATUS", "CODE", "STARTED", "DURATION"],
      ...tasks.map((task) => [
        task.path,
        task.status,
        task.code === null ? "-" : String(task.code),
        task.started_at ?? "-",
        duration(task.started_at, task.ended_at),
      ]),
    ]),
  )
}

/** `run stop RUN`: aborts a queued or running run. */
export async function stopRun(api: ApiClient, run: string, json: boolean) {
  const stopped = (await api.call("POST", `/api/runs/${encodeURIComponent(run)}/stop`)).body as RunRow
  // The operator kills the tasks after this answer: a run not yet aborted is on its way there.
  const said = isFinalRunStatus(stopped.status) ? stopped.status : "stopping"
  process.stdout.write(json ? `${JSON.stringify(stopped, null, 2)}\n` : `run ${stopped.id} ${said}\n`)
}

/**
 * `run logs RUN [-f] [--task PATH]`: the run's output, task-labelled lines as `runnel runner` prints them.
 * With -f, replayed then followed over the run's event stream (GET /api/runs/:id/events), answering the
 * run's exit code (130 when Ctrl-C detaches). Without -f, what is stored now, answering 0.
 */
export async function runLogs(
  api: ApiClient,
  run: string,
  options: { follow: boolean; task?: string; json: boolean },
): Promise<number> {
  const path = `/api/runs/${encodeURIComponent(run)}`
  const status = ((await api.call("GET", path)).body as RunRow).status
  if (options.task !== undefined) await knownTask(api, run, options.task)
  if (!options.follow && !isFinalRunStatus(status)) {
    // The stream would follow a running run to its end; without -f, print what is stored and leave.
    await storedOutput(api, run, options)
    process.stderr.write(`run ${run} is ${status}; follow it with \`runnel run logs ${run} -f\`\n`)
    return 0
  }
  const observer = new TerminalObserver(process.stdout, process.stderr)
  const detach = new AbortController()
  const onInterrupt = () => detach.abort()
  process.once("SIGINT", onInterrupt)
  try {
    for await (const event of api.events("GET", `${path}/events`, undefined, detach.signal)) {
      const { stream, data, path: task, event: kind, code, message } = event as Record<string, unknown>
      if (options.task !== undefined && task !== undefined && task !== options.task) continue
      if (options.json) {
        process.stdout.write(`${JSON.stringify(event)}\n`)
      } else if (stream === "stdout" || stream === "stderr") {
        observer.output(String(task), stream, String(data))
      } else if (kind === "error") {
        observer.flush()
        process.stderr.write(`runnel: ${String(message)}\n`)
      }
      if (kind === "exit") {
        observer.flush()
        const exit = typeof code === "number" ? code : 1
        if (!options.json) process.stderr.write(`run ${run} ended with exit code ${exit}\n`)
        return options.follow ? exit : 0
      }
    }
    observer.flush()
    if (detach.signal.aborted) {
      process.stderr.write(
        `runnel: detached; run ${run} goes on on the server (stop it with \`runnel run stop ${run}\`)\n`,
      )
      return 130
    }
    throw new SystemError(`the event stream from ${api.url} ended before run ${run} finished; try again`)
  } finally {
    process.off("SIGINT", onInterrupt)
  }
}

/** A --task that names no task of the run is a mistake to say, not an empty log. */
async function knownTask(api: ApiClient, run: string, task: string) {
  const tasks = (await api.call("GET", `/api/runs/${encodeURIComponent(run)}/tasks?output=false`)).body as TaskRow[]
  if (!tasks.some((t) => t.path === task)) {
    const known = tasks.map((t) => t.path).join(", ")
    throw badRequest(`run ${run} has no task "${task}"; its tasks: ${known === "" ? "none yet" : known}`)
  }
}

/** The stored output of a running run, task by task in start order. */
async function storedOutput(api: ApiClient, run: string, options: { task?: string; json: boolean }) {
  const tasks = (await api.call("GET", `/api/runs/${encodeURIComponent(run)}/tasks`)).body as (TaskRow & {
    stdout: string
    stderr: string
  })[]
  const observer = new TerminalObserver(process.stdout, process.stderr)
  for (const task of tasks) {
    if (options.task !== undefined && task.path !== options.task) continue
    for (const stream of ["stdout", "stderr"] as const) {
      if (task[stream] === "") continue
      if (options.json) process.stdout.write(`${JSON.stringify({ stream, data: task[stream], path: task.path })}\n`)
      else observer.output(task.path, stream, task[stream])
    }
  }
  observer.flush()
}

function duration(from: string | null, to: string | null): string {
  if (from === null) return "-"
  const ms = (to === null ? Date.now() : Date.parse(to)) - Date.parse(from)
  const text =
    ms < 60_000 ? `${(ms / 1000).toFixed(1)}s` : `${Math.floor(ms / 60_000)}m${Math.round((ms % 60_000) / 1000)}s`
  return to === null ? `${text}+` : text
}
