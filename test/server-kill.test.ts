import { createHmac } from "node:crypto"
import { existsSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { call, eventually, type ServerProcess, serverProcesses } from "./server-process.ts"

// `runnel server` killed with SIGKILL (as by the OOM killer or a node failure) and started again on
// the same storage: what it had accepted finishes, once, and nothing it started runs twice at once.

const servers = serverProcesses("runnel-server-kill-test-")
afterAll(() => servers.cleanUp())

const final = ["success", "failure", "error", "aborted"]
const finalRun = (base: string, id: string, timeoutMs = 90_000) =>
  eventually(
    () => call(base, "GET", `/api/runs/${id}`),
    (answer) => final.includes(answer.body.status),
    `run ${id} ends`,
    timeoutMs,
  )

/** Kills the server process alone (its tasks lead groups of their own) and waits until it is gone. */
async function kill(server: ServerProcess): Promise<void> {
  const exited = new Promise((resolve) => server.child.once("exit", resolve))
  server.child.kill("SIGKILL")
  await exited
}

/**
 * A pipeline whose one native task appends `start <run> <pid>` to `file`, sleeps, then appends `end <run> <pid>`;
 * from a webhook it answers first, with its run id.
 */
const marking = (file: string, seconds: number) => `export const pipeline = async () => {
  if (http.request() !== undefined) http.respond({ status: 200, body: { run_id: pipelineContext.runID } })
  const shell = 'echo "start $RUN $$" >> ${file}; sleep ${seconds}; echo "end $RUN $$" >> ${file}'
  await runtime.run({ name: "mark", image: "busybox", command: { path: "sh", args: ["-c", shell] }, env: { RUN: pipelineContext.runID } })
}
`

type Mark = { kind: "start" | "end"; run: string; pid: number }
const marks = (file: string): Mark[] =>
  readFileSync(file, "utf8")
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => {
      const [kind, run, pid] = line.split(" ")
      return { kind: kind as Mark["kind"], run: run ?? "", pid: Number(pid) }
    })

/** Whether a process with this pid still runs (a zombie nobody reaps has ended). */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z"
  } catch {
    return false
  }
}

/**
 * The executions of each run's task, in order, checked to never overlap: an `end` belongs to the
 * run's latest `start`, so a task started again while its first execution still ran fails here.
 */
function executionsByRun(file: string): Map<string, Mark[]> {
  const byRun = new Map<string, Mark[]>()
  for (const mark of marks(file)) {
    const seen = byRun.get(mark.run) ?? []
    if (mark.kind === "end") {
      const latest = seen.findLast((earlier) => earlier.kind === "start")
      expect(latest?.pid, `run ${mark.run}: an end of execution ${mark.pid} after a later one started`).toBe(mark.pid)
    }
    byRun.set(mark.run, [...seen, mark])
  }
  return byRun
}

describe("runnel server killed with SIGKILL, then started again on the same storage", () => {
  it("kills the native task the killed server left running before its run's task starts again", async () => {
    const db = join(servers.dir, "native-orphan.db")
    const file = join(servers.dir, "native-orphan.marks")
    const first = await servers.start(["--storage-sqlite-path", db])
    expect((await call(first.url, "PUT", "/api/pipelines/orphan", { content: marking(file, 4) })).status).toBe(201)
    const trigger = await call(first.url, "POST", "/api/pipelines/orphan/trigger")
    expect(trigger.status).toBe(202)
    const [orphan] = await eventually(
      async () => (existsSync(file) ? marks(file) : []),
      (seen) => seen.length > 0,
      "the task starts",
    )
    await kill(first)
    expect(alive(orphan?.pid ?? 0), "the task outlives the server that started it").toBe(true)

    const second = await servers.start(["--storage-sqlite-path", db])
    const run = await finalRun(second.url, trigger.body.run_id)
    expect(run.body.status).toBe("success")
    expect(alive(orphan?.pid ?? 0)).toBe(false)
    const executions = executionsByRun(file).get(trigger.body.run_id) ?? []
    // The orphan never wrote its end: it was killed before the rerun started.
    expect(executions.map((mark) => mark.kind)).toEqual(["start", "start", "end"])
    expect(executions[1]?.pid).not.toBe(orphan?.pid)
    await kill(second)
  }, 120_000)
})
