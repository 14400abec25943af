import { createHmac } from "node:crypto"
import { existsSync, mkdtempSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { call, eventually, type ServerProcess, serverProcesses } from "./server-process.ts"

// `runnel server` killed with SIGKILL (as by the OOM killer or a node failure) and started again on
// the same storage: what it had accepted finishes, once, and nothing it started runs twice at once.

const servers = serverProcesses("runnel-server-kill-test-")
afterAll(() => servers.cleanUp())
// The servers inherit a work root of their own (the native driver's is $TMPDIR/runnel): a runnel of
// another checkout on this machine, started meanwhile, would remove a killed server's run directory
// without killing its task, and the kill of the orphan would not be this code's.
process.env.TMPDIR = mkdtempSync(join(servers.dir, "tmp-"))

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
 * A pipeline whose one native task appends `start <run> <pid>` to `file`, sleeps (`first` seconds in
 * its run's first execution, `again` in a later one), then appends `end <run> <pid>`;
 * from a webhook it answers first, with its run id.
 */
const marking = (file: string, first: number, again: number) => `export const pipeline = async () => {
  if (http.request() !== undefined) http.respond({ status: 200, body: { run_id: pipelineContext.runID } })
  const shell = 'echo "start $RUN $$" >> ${file}; if [ "$(grep -c "^start $RUN " ${file})" = 1 ]; then sleep ${first}; else sleep ${again}; fi; echo "end $RUN $$" >> ${file}'
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
    expect((await call(first.url, "PUT", "/api/pipelines/orphan", { content: marking(file, 60, 0) })).status).toBe(201)
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

describe("runnel server killed with SIGKILL in the middle of a webhook burst", () => {
  const secret = "whsec-kill-test-7d2e"
  const body = JSON.stringify({ ref: "refs/heads/main", repository: { full_name: "runnel/kill" } })
  const headers = {
    "Content-Type": "application/json",
    "X-GitHub-Event": "push",
    "X-Hub-Signature-256": `sha256=${createHmac("sha256", secret).update(body).digest("hex")}`,
  }

  it("finishes, after the restart, the run of every webhook it answered, running again only tasks the kill caught", async () => {
    const db = join(servers.dir, "burst.db")
    const file = join(servers.dir, "burst.marks")
    const maxInFlight = 10
    const flags = ["--storage-sqlite-path", db, "--max-queue-size", "1000", "--max-in-flight", String(maxInFlight)]
    const first = await servers.start(flags)
    const put = await call(first.url, "PUT", "/api/pipelines/burst", {
      content: marking(file, 0.3, 0.3),
      webhook_secret: secret,
    })
    expect(put.status).toBe(201)

    const sent = 120
    const killAfter = 40
    const accepted: string[] = []
    let next = 0
    let killing: Promise<void> | undefined
    const sender = async () => {
      while (next < sent) {
        next++
        // The kill cuts requests in flight: those were never answered, so nothing is promised about them.
        const answer = await fetch(`${first.url}/api/webhooks/burst`, { method: "POST", headers, body }).catch(
          () => undefined,
        )
        if (answer === undefined) continue
        const text = await answer.text().catch(() => undefined)
        if (text === undefined) continue
        expect([200, 202], text).toContain(answer.status)
        accepted.push(JSON.parse(text).run_id)
        if (accepted.length === killAfter) killing ??= kill(first)
      }
    }
    await Promise.all(Array.from({ length: 16 }, sender))
    await killing
    expect(accepted.length).toBeGreaterThanOrEqual(killAfter)
    expect(accepted.length, "the kill cut the burst short").toBeLessThan(sent)

    const second = await servers.start(flags)
    for (const id of accepted) expect((await finalRun(second.url, id)).body.status, id).toBe("success")
    // Runs whose webhook was cut before its answer may exist too, but never more runs than webhooks sent.
    const runs = await call(second.url, "GET", "/api/runs?pipeline_id=burst&per_page=1")
    expect(runs.body.total_items).toBeGreaterThanOrEqual(new Set(accepted).size)
    expect(runs.body.total_items).toBeLessThanOrEqual(sent)
    expect(new Set(accepted).size).toBe(accepted.length)

    const executions = executionsByRun(file)
    const again: string[] = []
    for (const id of accepted) {
      const starts = (executions.get(id) ?? []).filter((mark) => mark.kind === "start").length
      expect(
        (executions.get(id) ?? []).some((mark) => mark.kind === "end"),
        `run ${id}'s task ended`,
      ).toBe(true)
      if (starts > 1) again.push(id)
      expect(starts, `run ${id}'s task`).toBeLessThanOrEqual(2)
    }
    // A task runs again only if the kill caught it running (or between its end and the record of it):
    // at most --max-in-flight runs execute at once. Finished runs and queued ones never run again.
    console.log(`${accepted.length} answered of ${sent}; tasks run again after the restart: ${again.length}`)
    expect(again.length).toBeLessThanOrEqual(maxInFlight)
    await kill(second)
  }, 240_000)
})
