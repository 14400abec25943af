import { DatabaseSync } from "node:sqlite"
import { errorMessage, SystemError } from "../core/errors.ts"

/**
 * The one way runnel's stores open, migrate and write to a SQLite file
 * (node:sqlite). It knows no store's tables: each store brings its own
 * migrations and statements.
 */

export type OpenDatabaseOptions = {
  /** How errors name the database: `the log store` gives `cannot open the log store "<path>": ...`. */
  readonly what: string
  /**
   * How long a statement waits for another connection's write lock before it
   * fails with "database is locked". Stores that two processes (API server
   * and operator) open at once need one; 0 fails at once.
   */
  readonly busyTimeoutMs: number
  /**
   * `NORMAL`: in WAL mode a commit is durable at the next checkpoint, so
   * power loss may lose the last commits but never corrupts the file; fast
   * enough for a stream of writes. `FULL`: every commit is synced to disk
   * before it returns, for rare writes that must not be lost.
   */
  readonly synchronous: "NORMAL" | "FULL"
}

/**
 * Opens the SQLite file at `path` (`:memory:` for a private database) in WAL
 * mode, which lets readers work beside a writer, another process's included.
 * A file that cannot be opened, or is not a database, is a SystemError naming
 * it; nothing stays open then.
 */
export function openDatabase(path: string, options: OpenDatabaseOptions): DatabaseSync {
  let db: DatabaseSync | undefined
  try {
    db = new DatabaseSync(path, { timeout: options.busyTimeoutMs })
    // The first statement reads the file: a file that is not a database fails here.
    db.exec(`PRAGMA journal_mode = WAL; PRAGMA synchronous = ${options.synchronous}`)
    return db
  } catch (error) {
    db?.close()
    throw new SystemError(`cannot open ${options.what} "${path}": ${errorMessage(error)}`, { cause: error })
  }
}

/**
 * Brings a database's schema up to date. `migrations` are the schema's steps
 * in order, and `PRAGMA user_version` counts the steps a file has had: append
 * new steps, never edit one that has shipped (files in use have run it). One
 * file holds one such schema.
 */
export function migrate(db: DatabaseSync, migrations: readonly string[]): void {
  const version = () => Number(db.prepare("PRAGMA user_version").get()?.user_version ?? 0)
  if (version() >= migrations.length) return
  // IMMEDIATE: two processes opening a new file at once take turns, and the second sees the first's steps.
  transaction(db, () => {
    for (let step = version(); step < migrations.length; step++) {
      db.exec(migrations[step] ?? "")
      db.exec(`PRAGMA user_version = ${step + 1}`)
    }
  })
}

/**
 * Runs `work` in one IMMEDIATE transaction and returns its result: committed
 * when it returns, rolled back when it throws. IMMEDIATE takes the write lock
 * at BEGIN, so what `work` reads cannot change under it before it writes (a
 * DEFERRED transaction that reads then writes fails with SQLITE_BUSY instead
 * of waiting). Not reentrant: `work` must not start a transaction.
 */
export function transaction<T>(db: DatabaseSync, work: () => T): T {
  db.exec("BEGIN IMMEDIATE")
  try {
    const result = work()
    db.exec("COMMIT")
    return result
  } catch (error) {
    // A COMMIT that failed may have ended the transaction already; a second error would hide the first.
    if (db.isTransaction) db.exec("ROLLBACK")
    throw error
  }
}
