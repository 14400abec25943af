import { execFileSync } from "node:child_process"
import { closeSync, mkdirSync, mkdtempSync, openSync, rmSync, symlinkSync, writeSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { DatabaseSync } from "node:sqlite"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { call, eventually, script, serverProcesses } from "./server-process.ts"

// Mounting a tmpfs needs root, which CI has: skipped with a warning elsewhere, except on CI (CI=true), where it fails.
const canMount = process.getuid?.() === 0 || process.env.CI === "true"
if (!canMount) console.warn("log store disk-full test skipped: mounting a tmpfs needs root")

describe.skipIf(!canMount)("the log store's disk fills", () => {
  const servers = serverProcesses("runnel-log-store-full-")
  const dir = mkdtempSync(join(tmpdir(), "runnel-full-disk-"))
  const disk = join(dir, "disk")
  const state = join(dir, "state")
  const logStore = join(disk, "runnel-logs.db")
  const filler = join(disk, "filler")

  beforeAll(() => {
    mkdirSync(disk)
    mkdirSync(state)
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=16m", "tmpfs", disk])
    // The resources stay on the big disk; only the log store (SQLite follows the link, and keeps its WAL beside
    // the file it points to) is on the small one, so that what fills is the log store's disk alone.
    symlinkSync(logStore, join(state, "runnel-logs.db"))
  })
  afterAll(() => {
    servers.cleanUp()
    execFileSync("umount", ["-l", disk])
    rmSync(dir, { recursive: true, force: true })
  })

  /** Writes zeros to `filler` until the disk says it is full. */
  const fillDisk = () => {
    const fd = openSync(filler, "w")
    const block = Buffer.alloc(64 << 10)
    try {
      for (;;) writeSync(fd, block)
    } catch (error) {
      expect((error as NodeJS.ErrnoException).code).toBe("ENOSPC")
    } finally {
      closeSync(fd)
    }
  }

  it("ends runs that cannot store output as error naming the store, keeps answering, and works again once there is room", async () => {
    const server = await servers.start(["--storage-sqlite-path", join(state, "runnel.db")])
    const api = (method: string, path: string, body?: unknown) => call(server.url, method, path, body)
    const runToEnd = async (name: string) => {
      const id = (await api("POST", `/api/pipelines/${name}/trigger`)).body.run_id
      const run = await eventually(
        () => api("GET", `/api/runs/${id}`),
        (answer) => !["queued", "running"].includes(answer.body.status),
        `run ${id} ends`,
        60_000,
      )
      return run.body
    }
    // 2,000 numbered lines (about 130 KB) before the disk fills; 200,000 (about 13 MB) while it is full.
    const lines = (count: number, what: string) =>
      `i=0; while [ $i -lt ${count} ]; do echo "line $i of the ${what} run, long enough to add up quickly........"; i=$((i+1)); done`
    expect((await api("PUT", "/api/pipelines/small", { content: script(lines(2_000, "small")) })).status).toBe(201)
    expect((await api("PUT", "/api/pipelines/big", { content: script(lines(200_000, "big")) })).status).toBe(201)

    const before = await runToEnd("small")
    expect(before.status).toBe("success")
    const beforeOutput = (await api("GET", `/api/runs/${before.id}/tasks`)).body[0].stdout
    expect(beforeOutput.split("\n")).toHaveLength(2_001)

    fillDisk()
    const full = await runToEnd("big")
    expect(full.status, JSON.stringify(full)).toBe("error")
    expect(full.error_message).toMatch(
      `the log store is full: output of this run could not be stored in ${join(state, "runnel-logs.db")} (SQLITE_FULL: database or disk is full); free space on its disk, then run it again`,
    )
    // The server answers while the disk is full: its probes, its lists, the run that failed.
    expect((await api("GET", "/readyz")).status).toBe(200)
    expect((await api("GET", "/api/runs")).status).toBe(200)
    expect((await api("GET", `/api/runs/${full.id}`)).body.status).toBe("error")

    rmSync(filler)
    const after = await runToEnd("small")
    expect(after.status, JSON.stringify(after)).toBe("success")
    expect((await api("GET", `/api/runs/${after.id}/tasks`)).body[0].stdout).toBe(beforeOutput)
    // What was stored before the disk filled is still there, whole.
    expect((await api("GET", `/api/runs/${before.id}/tasks`)).body[0].stdout).toBe(beforeOutput)

    const exited = new Promise((resolve) => server.child.once("exit", resolve))
    server.child.kill("SIGTERM")
    await exited
    const db = new DatabaseSync(logStore, { readOnly: true })
    try {
      expect(db.prepare("PRAGMA integrity_check").all()).toEqual([{ integrity_check: "ok" }])
    } finally {
      db.close()
    }
  }, 180_000)
})
