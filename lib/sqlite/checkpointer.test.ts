import { mkdtempSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { DatabaseSync } from "node:sqlite"
import { setTimeout as sleep } from "node:timers/promises"
import { describe, expect, it, onTestFinished } from "vitest"
import { checkpointer, fallbackPages } from "./checkpointer.ts"
import { openDatabase, transaction } from "./database.ts"

const walBytes = (path: string) => statSync(`${path}-wal`).size

/** A writer as the embedded API's object store is one: a transaction per write, the checkpointer told of each. */
function writer(dir: string) {
  const path = join(dir, "store.db")
  const db = openDatabase(path, { what: "the test store", busyTimeoutMs: 0, synchronous: "NORMAL" })
  db.exec(`PRAGMA wal_autocheckpoint = ${fallbackPages}`)
  db.exec("CREATE TABLE rows (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
  const rest = db.prepare("PRAGMA wal_checkpoint(PASSIVE)")
  const checkpoints = checkpointer(path, () => rest.get())
  const insert = db.prepare("INSERT INTO rows (body) VALUES (?)")
  return {
    path,
    db,
    checkpoints,
    write(body: string) {
      transaction(db, () => insert.run(body))
      checkpoints.committed()
    },
  }
}

describe("the checkpointer", () => {
  it("keeps a busy writer's write-ahead log near its cadence, far under the writer's own fallback", async () => {
    const dir = mkdtempSync(join(tmpdir(), "runnel-checkpointer-"))
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
    const store = writer(dir)
    // 6,000 transactions of two pages each: 48 MiB of log, past the fallback's 40 MiB.
    const body = "x".repeat(6000)
    let largest = 0
    // About 2,000 writes a second: twice what 300 webhook runs a second write.
    for (let n = 0; n < 6000; n++) {
      store.write(body)
      if (n % 4 === 0) {
        await sleep(2)
        largest = Math.max(largest, walBytes(store.path))
      }
    }
    store.checkpoints.close()
    store.db.close()
    // The log file is reused from its start after each complete checkpoint: it never grew near 40 MiB.
    expect(largest).toBeLessThan(20 * 2 ** 20)
    const reader = new DatabaseSync(store.path)
    onTestFinished(() => reader.close())
    expect(reader.prepare("SELECT count(*) AS n FROM rows").get()).toEqual({ n: 6000 })
    expect(reader.prepare("PRAGMA integrity_check").get()).toEqual({ integrity_check: "ok" })
  })

  it("starts no thread for a writer that commits less than one checkpoint's worth", async () => {
    const dir = mkdtempSync(join(tmpdir(), "runnel-checkpointer-"))
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
    let finished = 0
    const db = openDatabase(join(dir, "store.db"), { what: "the test store", busyTimeoutMs: 0, synchronous: "NORMAL" })
    onTestFinished(() => db.close())
    const checkpoints = checkpointer(join(dir, "store.db"), () => finished++)
    for (let n = 0; n < 200; n++) checkpoints.committed()
    await sleep(200)
    expect(finished).toBe(0)
    for (let n = 0; n < 56; n++) checkpoints.committed()
    await expect.poll(() => finished, { timeout: 10_000 }).toBe(1)
    checkpoints.close()
  })
})
