import { existsSync, mkdtempSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { DatabaseSync } from "node:sqlite"
import { afterAll, describe, expect, it } from "vitest"
import { runnel } from "./cli.ts"
import { call, eventually, runToEnd, script, serverProcesses } from "./server-process.ts"

// Run history retention (--keep-runs) end to end: real `runnel server` processes over HTTP, native tasks,
// the embedded API, and the log store file the server writes beside its database.

const servers = serverProcesses("runnel-retention-")
afterAll(() => servers.cleanUp())

const runIdsOf = async (base: string, pipeline: string): Promise<string[]> => {
  const answer = await call(base, "GET", `/api/runs?pipeline_id=${pipeline}&per_page=100`)
  expect(answer.status).toBe(200)
  return answer.body.items.map((run: { id: string }) => run.id)
}

/** Rows the server's log store (runnel-logs.db beside runnel.db) still keeps for a run: its tasks and output. */
function storedRows(cwd: string, runId: string): number {
  const db = new DatabaseSync(join(cwd, "runnel-logs.db"), { readOnly: true })
  try {
    const row = db
      .prepare(
        "SELECT (SELECT count(*) FROM tasks WHERE run_id = ?) + (SELECT count(*) FROM chunks WHERE run_id = ?) AS n",
      )
      .get(runId, runId)
    return Number(row?.n)
  } finally {
    db.close()
  }
}

describe("--keep-runs", () => {
  it("keeps the newest 3 finished runs of a pipeline with their output, deletes the older ones' output, never a running run's nor another pipeline's", async () => {
    const server = await servers.start(["--keep-runs", "3"])
    const base = server.url
    const gate = mkdtempSync(join(servers.dir, "gate-"))
    const fast = join(gate, "fast")
    // Until the file exists the task sleeps: the first run stays running while the others finish.
    const shell = `if [ -e ${fast} ]; then echo kept output; else touch ${join(gate, "slow")}; sleep 60; fi`
    for (const name of ["kept", "other"]) {
      expect((await call(base, "POST", "/api/pipelines", { name, content: script(shell) })).status).toBe(201)
    }
    const slow = await call(base, "POST", "/api/pipelines/kept/trigger")
    expect(slow.status).toBe(202)
    await eventually(
      async () => existsSync(join(gate, "slow")),
      (started) => started,
      "the slow run's task is sleeping",
    )
    writeFileSync(fast, "")
    const others = [await runToEnd(base, "other"), await runToEnd(base, "other")].map(({ run }) => run.id)
    const finished: string[] = []
    for (let i = 0; i < 6; i++) {
      const { run } = await runToEnd(base, "kept")
      expect(run.status).toBe("success")
      finished.push(run.id)
    }
    const newest = finished.slice(3)
    const ids = await eventually(
      () => runIdsOf(base, "kept"),
      (list) => list.length === 4,
      "the kept pipeline has its running run and 3 finished ones",
    )
    expect(new Set(ids)).toEqual(new Set([slow.body.run_id, ...newest]))
    expect((await call(base, "GET", `/api/runs/${slow.body.run_id}`)).body.status).toBe("running")
    for (const id of newest) {
      const tasks = await call(base, "GET", `/api/runs/${id}/tasks`)
      expect(tasks.status).toBe(200)
      expect(tasks.body[0].stdout).toBe("kept output\n")
    }
    for (const id of finished.slice(0, 3)) {
      expect((await call(base, "GET", `/api/runs/${id}`)).status).toBe(404)
      expect((await call(base, "GET", `/api/runs/${id}/tasks`)).status).toBe(404)
      await eventually(
        async () => storedRows(server.cwd, id),
        (rows) => rows === 0,
        `the log store forgets run ${id}`,
      )
    }
    expect(storedRows(server.cwd, newest[0] as string)).toBeGreaterThan(0)
    expect(new Set(await runIdsOf(base, "other"))).toEqual(new Set(others))

    // Stopped, the slow run is finished and the oldest: it goes in its turn, its output with it.
    expect((await call(base, "POST", `/api/runs/${slow.body.run_id}/stop`)).status).toBe(200)
    await eventually(
      () => call(base, "GET", `/api/runs/${slow.body.run_id}`),
      (answer) => answer.status === 404,
      "the stopped run, now the oldest finished one, is deleted",
    )
    expect(new Set(await runIdsOf(base, "kept"))).toEqual(new Set(newest))
  }, 120_000)

  it("keeps every run with --keep-runs 0", async () => {
    const server = await servers.start(["--keep-runs", "0"])
    expect((await call(server.url, "POST", "/api/pipelines", { name: "all", content: script("echo hi") })).status).toBe(
      201,
    )
    const ids: string[] = []
    for (let i = 0; i < 5; i++) ids.push((await runToEnd(server.url, "all")).run.id)
    // A pipeline's own run finishing is what prunes; a moment later all five are still there.
    await new Promise((resolve) => setTimeout(resolve, 500))
    expect(new Set(await runIdsOf(server.url, "all"))).toEqual(new Set(ids))
    for (const id of ids) expect(storedRows(server.cwd, id)).toBeGreaterThan(0)
  }, 60_000)

  it.each([
    [["server", "--keep-runs", "-1"], {}, '--keep-runs must be a whole number (0 or more), not "-1"'],
    [["server", "--keep-runs", "ten"], {}, '--keep-runs must be a whole number (0 or more), not "ten"'],
    [["server"], { CI_KEEP_RUNS: "1.5" }, '--keep-runs must be a whole number (0 or more), not "1.5"'],
  ])("refuses %j %j with a message naming the flag", async (args, env, message) => {
    const result = await runnel(args, { env: { ...env, CI_STORAGE_SQLITE_PATH: ":memory:", CI_PORT: "0" } })
    expect(result.code).toBe(2)
    expect(result.stderr).toContain(`runnel: ${message}`)
  })
})
