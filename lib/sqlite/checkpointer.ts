import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads"
import { openDatabase } from "./database.ts"

/**
 * Copies a SQLite file's write-ahead log into the file on a thread of its
 * own, so that the thread that writes rarely waits for it. SQLite's automatic
 * checkpoint runs inside the COMMIT that crosses 1000 pages of log, and with
 * `synchronous = NORMAL` it syncs the log and the file to disk: on this
 * project's machines such a COMMIT held the embedded API's thread (which is
 * also the API's and the operator's) for 20-65 ms, about once per 110 Run
 * writes, and those waits were more than half of its time spent writing.
 *
 * The writer calls `committed()` after each transaction; every
 * `checkpointEvery` of them (a Run's write adds 6 to 8 pages of log), a
 * PASSIVE checkpoint runs on this thread: it copies what is committed without
 * blocking the writer or readers. The log starts over only once a checkpoint
 * has copied all of it, which a pass beside a busy writer rarely does (what
 * the writer committed meanwhile stays behind), so `finish`, the writer's own
 * PASSIVE checkpoint, then copies that rest: a few pages and two short syncs
 * (8-11 ms, against 20-65 for the whole). These are the checkpoints SQLite
 * would have run, so a commit is as durable as before: in the log at once,
 * synced at the next checkpoint. The writer's connection keeps an automatic
 * checkpoint at `fallbackPages`, in case this thread falls behind or fails.
 * The thread starts with the first checkpoint, so a database that is only
 * read, or barely written, costs none.
 */
export type Checkpointer = {
  /** The writer committed a transaction. */
  committed(): void
  /** Ends the thread once its checkpoint is done; the writer's own close, after this, checkpoints the rest. */
  close(): void
}

/** The writer's automatic checkpoint, a safety net only: ten times SQLite's default. */
export const fallbackPages = 10_000
/** About 2000 pages of log (8 MiB) between checkpoints: twice SQLite's default, so the writer finishes half as often. */
const checkpointEvery = 256
const role = "runnel-checkpointer"
/** `closed`: an Int32Array's first element, set to 1 once the thread has closed its connection. */
type CheckpointerData = { role: typeof role; path: string; closed: SharedArrayBuffer }

export function checkpointer(path: string, finish: () => void): Checkpointer {
  let worker: Worker | undefined
  let pending = 0
  let closed = false
  const threadClosed = new Int32Array(new SharedArrayBuffer(4))
  return {
    committed() {
      if (closed || ++pending < checkpointEvery) return
      pending = 0
      if (worker === undefined) {
        worker = new Worker(new URL(import.meta.url), {
          workerData: { role, path, closed: threadClosed.buffer } satisfies CheckpointerData,
        })
        // A checkpoint that failed is retried at the next threshold; the fallback bounds the log meanwhile.
        worker.on("error", (error) => {
          process.emitWarning(`the checkpointer of "${path}" stopped: ${error.message}`)
          worker = undefined
        })
        worker.on("message", () => {
          if (closed) return
          try {
            finish()
          } catch (error) {
            // Not the writer's failure: the next checkpoint copies what this one left.
            process.emitWarning(`a checkpoint of "${path}" failed: ${(error as Error).message}`)
          }
        })
        worker.unref()
      }
      worker.postMessage("checkpoint")
    },
    close() {
      closed = true
      if (worker === undefined) return
      worker.postMessage("close")
      // Waited for, so that the writer's connection is the last to close, and its close, as before, runs
      // the final checkpoint: a last connection that closes takes the file's exclusive lock for it, and a
      // process that opened the file again meanwhile would find it locked.
      Atomics.wait(threadClosed, 0, 0, 5_000)
    },
  }
}

if (!isMainThread && (workerData as CheckpointerData | undefined)?.role === role) {
  const { path, closed } = workerData as CheckpointerData
  const db = openDatabase(path, { what: "the checkpointer's database", busyTimeoutMs: 1000, synchronous: "NORMAL" })
  const checkpoint = db.prepare("PRAGMA wal_checkpoint(PASSIVE)")
  parentPort?.on("message", (message: "checkpoint" | "close") => {
    if (message === "close") {
      db.close()
      const flag = new Int32Array(closed)
      Atomics.store(flag, 0, 1)
      Atomics.notify(flag, 0)
      parentPort?.close()
      return
    }
    checkpoint.get()
    parentPort?.postMessage("done")
  })
}
