import Router from "@koa/router"
import type { Context } from "koa"
import type { Feature } from "../../lib/config/features.ts"
import { badRequest, errorMessage } from "../../lib/core/errors.ts"
import type { Log } from "../../lib/core/log.ts"
import { type FinalRunStatus, isFinalRunStatus, runExitCode } from "../../lib/core/status.ts"
import type { ResourceClient } from "../../lib/kube/resource-client.ts"
import type { LogStore } from "../../lib/logs/log-store.ts"
import { requestUser } from "../auth/authenticate.ts"
import { objectBody, onlyFields } from "../body.ts"
import { admitRun, type NewRunDeps, refuseIfPaused } from "../new-run.ts"
import { secretMapOf } from "../pipeline-body.ts"
import type { RunIndex } from "../resource-index.ts"
import { checked, type RouteAccess } from "../route-access.ts"
import { openSse, type SseWriter } from "../sse.ts"

export type EventRoutesDeps = NewRunDeps & {
  /** `secrets` gates a run's global secrets. */
  features: readonly Feature[]
  resources: Pick<ResourceClient, "getRun">
  logs: Pick<LogStore, "readChunks" | "bytesAfter" | "lastChunkId" | "attach">
  log: Log
  /** How often a follower looks for new output while the run is quiet. */
  pollMs?: number
  /** Comment heartbeat interval of the streams. */
  heartbeatMs?: number
  access: RouteAccess
}

/**
 * Chunks read per store query: at most this many rows of at most 16 KiB,
 * about what a client's buffers take before they are full. A batch that
 * does not fit is read again once the client has room (see sendBatch), so a
 * larger one would be read, copied and dropped over and over for a slow
 * client (a thousand streams of one run measured ≈4x slower, RSS +310 MiB, with 256 rows).
 */
const readBatch = 16
/**
 * A client whose buffer stays full while the run stores this much more
 * output is dropped, with a comment saying so: it reconnects with
 * Last-Event-ID and reads on from the store. Counted from when it stalled,
 * so a client reading a long history slowly is not dropped for the history.
 * Waiting costs little (a waiting stream holds no output, see sendBatch), so
 * this is not a memory bound but how long a stalled client is kept: about
 * 70 ms of output at pipe speed (60 MB/s), or minutes of a chatty build's.
 */
const maxBehindBytes = 4 << 20
/** How far behind is counted in rows: maxBehindBytes of 16 KiB rows, and some. */
const maxBehindRows = 2 * (maxBehindBytes >> 14)
/** How often a stalled client's distance behind the run is measured. */
const behindCheckMs = 1_000
/**
 * A quiet run is looked at after this long, doubling up to maxPollMs while it stays quiet, and
 * again this soon once output arrives: the store for output, then the Run for its phase. The API
 * server may run in another process than the operator, so it follows the shared store, not an
 * in-process bus. Measured on a no-op pipeline (20 runs, `runnel server`, native driver), POST
 * /run to the exit event: median 61 ms with a fixed 50 ms poll, 20 ms with this backoff, against
 * 24 ms for a trigger and polling GET /api/runs/:id every 2 ms until success.
 */
const defaultPollMs = 10
const maxPollMs = 100

/**
 * Streamed run output over SSE (contract.md section 4, interface.md Events):
 * GET /api/runs/:id/events attaches to any run, POST /api/pipelines/:name/run
 * starts one and attaches to it.
 */
export function eventRoutes(deps: EventRoutesDeps): Router {
  const router = new Router()

  router.get("/api/runs/:id/events", deps.access.run, async (ctx) => {
    const id = checked.run(ctx.state).metadata?.name ?? ""
    await stream(ctx, id, lastEventId(ctx.get("Last-Event-ID")), deps)
  })

  router.post("/api/pipelines/:name/run", deps.access.pipeline, async (ctx) => {
    const body = objectBody(ctx.state.body, { required: false })
    onlyFields(body, ["args", "trigger_type", "global_secrets"])
    const args = body.args ?? []
    if (!Array.isArray(args) || args.some((arg) => typeof arg !== "string")) {
      throw badRequest('"args" must be an array of strings, for example ["--fast", "main"]')
    }
    // `runnel pipeline run` says so; a run started otherwise is manual, or args when it has some.
    const given = body.trigger_type
    if (given !== undefined && given !== "cli") {
      throw badRequest(`"trigger_type" ${JSON.stringify(given)} cannot be given; the only one a client names is "cli"`)
    }
    const pipeline = checked.pipeline(ctx.state)
    refuseIfPaused(pipeline)
    const run = await admitRun(deps, pipeline, {
      type: given ?? (args.length > 0 ? "args" : "manual"),
      args: args as string[],
      by: requestUser(ctx).actor,
      globalSecrets: secretMapOf("global_secrets", body.global_secrets, deps.features),
    })
    const id = run.metadata?.name ?? ""
    // The run's id before any event: a client that detaches can still name the run.
    ctx.set("Location", `/api/runs/${id}`)
    await stream(ctx, id, 0, deps)
  })

  return router
}

/** Resolves on the next change of Run `id` in the index, after `ms`, or when `signal` aborts, whichever is first. */
function nextChange(runs: Pick<RunIndex, "onChange">, id: string, ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer)
      unsubscribe()
      signal.removeEventListener("abort", done)
      resolve()
    }
    const timer = setTimeout(done, ms)
    const unsubscribe = runs.onChange(id, done)
    signal.addEventListener("abort", done)
  })
}

function lastEventId(header: string): number {
  if (header === "") return 0
  if (!/^\d{1,15}$/.test(header)) {
    throw badRequest(`Last-Event-ID "${header}" is not an event id of this stream; ids are whole numbers`)
  }
  return Number(header)
}

/** Answers with the run's event stream; errors from here on end the stream, never become a JSON answer. */
async function stream(ctx: Context, runId: string, afterId: number, deps: EventRoutesDeps): Promise<void> {
  ctx.status = 200
  ctx.respond = false
  const sse = openSse(ctx.res, deps.heartbeatMs === undefined ? {} : { heartbeat: deps.heartbeatMs })
  try {
    await follow(sse, runId, afterId, deps)
  } catch (error) {
    if (!sse.signal.aborted) {
      deps.log("api.stream.error", { run: runId, error: errorMessage(error) })
      await sse.send({ event: "error", message: `the event stream failed: ${errorMessage(error)}` })
    }
  } finally {
    sse.end()
  }
}

/**
 * Replays the run's stored output after `afterId`, then follows it until the
 * run has a final phase, then sends `error` (for status error) and `exit`.
 * The operator commits a run's output before it writes the final phase, so
 * once the phase is seen final, one read that finds nothing more means the
 * stream is complete. A client that leaves stops this reading only.
 */
async function follow(sse: SseWriter, runId: string, afterId: number, deps: EventRoutesDeps): Promise<void> {
  const pollMs = deps.pollMs ?? defaultPollMs
  let wait = pollMs
  let cursor = afterId
  /** The Run's status once seen final; "deleted" when the Run went away first. */
  let ended: { phase: FinalRunStatus; code?: number | null; message?: string } | "deleted" | undefined
  while (!sse.signal.aborted) {
    const sent = sendBatch(sse, runId, cursor, deps.logs)
    cursor = sent.cursor
    if (sent.stalled && !(await keepUp(sse, runId, cursor, deps.logs))) return
    if (sse.signal.aborted) return
    if (sent.count > 0) {
      wait = pollMs
      continue
    }
    // Seen final before this read found nothing: everything stored before the final phase was read.
    if (ended !== undefined) break
    // The watched index costs no request; a Run it has not seen yet is asked for.
    const run = deps.index.runs.get(runId) ?? (await deps.resources.getRun(runId))
    const phase = run?.status?.phase
    if (run === undefined) ended = "deleted"
    else if (isFinalRunStatus(phase)) ended = { ...run.status, phase }
    else {
      // The Run's next change (its final phase, say) ends the wait at once; quiet output backs off.
      await nextChange(deps.index.runs, runId, wait, sse.signal)
      wait = Math.min(wait * 2, Math.max(maxPollMs, pollMs))
    }
  }
  if (ended === undefined || sse.signal.aborted) return
  if (ended === "deleted") {
    // Deleting a Run stops it (the operator aborts it): the stream ends as a stopped run's does.
    await sse.send({ event: "error", message: `run "${runId}" was deleted before it finished` })
    await sse.send({ event: "exit", code: runExitCode("aborted"), run_id: runId })
    return
  }
  // What the Run's status says: the operator settled its code with runExitCode, which stands in only for a status without one.
  if (ended.phase === "error") await sse.send({ event: "error", message: ended.message || "the run failed" })
  await sse.send({ event: "exit", code: ended.code ?? runExitCode(ended.phase), run_id: runId })
}

/**
 * Reads the next chunks after `cursor` and writes them until the client's
 * buffer is full. In a function of its own, so that the batch is garbage once
 * it returns: a stream waiting for its client holds no output (the rest of
 * the batch is read again), whatever the run printed.
 */
function sendBatch(
  sse: SseWriter,
  runId: string,
  cursor: number,
  logs: Pick<LogStore, "readChunks">,
): { cursor: number; count: number; stalled: boolean } {
  let count = 0
  for (const chunk of logs.readChunks(runId, cursor, readBatch)) {
    // `path` names the task, so a reader can label lines or show one task's output (the web UI, `runnel run logs`).
    const room = sse.write({ stream: chunk.stream, data: chunk.text, path: chunk.path }, chunk.id)
    cursor = chunk.id
    count++
    if (!room) return { cursor, count, stalled: true }
  }
  return { cursor, count, stalled: false }
}

/**
 * Waits until the client has room again; false when the run stored more
 * than maxBehindBytes of output meanwhile, and the client was dropped.
 */
async function keepUp(
  sse: SseWriter,
  runId: string,
  cursor: number,
  logs: Pick<LogStore, "bytesAfter" | "lastChunkId">,
) {
  const stalledAt = logs.lastChunkId(runId)
  while (!(await sse.drained(behindCheckMs))) {
    const behind = logs.bytesAfter(runId, stalledAt, maxBehindRows)
    if (behind > maxBehindBytes) {
      sse.drop(
        `runnel: this client fell ${behind} bytes behind the run's output while it read nothing; reconnect with Last-Event-ID: ${cursor} to go on from there`,
      )
      return false
    }
  }
  return true
}
