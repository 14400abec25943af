import { setPriority } from "node:os"
import type { DatabaseSync, SQLOutputValue, StatementSync } from "node:sqlite"
import {
  isMainThread,
  MessageChannel,
  type MessagePort,
  parentPort,
  receiveMessageOnPort,
  type TransferListItem,
  Worker,
  workerData,
} from "node:worker_threads"
import { errorMessage, SystemError } from "../core/errors.ts"
import type { OutputStream, TaskRecord } from "../core/run.ts"
import type { TaskStatus } from "../core/status.ts"
import { migrate, openDatabase, transaction } from "../sqlite/database.ts"
import type { LogStore, OutputPage, SearchHit, SearchPage, SearchRequest, StoredChunk } from "./log-store.ts"

/** Schema steps for migrate(): append new steps, never edit one that has shipped. */
const migrations: readonly string[] = [
  `CREATE TABLE tasks (
     run_id TEXT NOT NULL,
     path TEXT NOT NULL,
     name TEXT NOT NULL,
     status TEXT NOT NULL,
     code INTEGER,
     started_at TEXT,
     ended_at TEXT,
     seq INTEGER NOT NULL,
     PRIMARY KEY (run_id, path)
   );
   CREATE INDEX tasks_by_start ON tasks (run_id, seq);
   CREATE TABLE chunks (
     id INTEGER PRIMARY KEY,
     run_id TEXT NOT NULL,
     path TEXT NOT NULL,
     stream TEXT NOT NULL,
     text TEXT NOT NULL
   );
   CREATE INDEX chunks_by_stream ON chunks (run_id, path, stream);
   -- External content: the index keeps no second copy of the text; snippet() reads it from chunks.
   CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content = 'chunks', content_rowid = 'id');
   -- Chunks up to this id are in chunks_fts. Ids only grow, so one number says what is left to index.
   CREATE TABLE fts_progress (indexed_through INTEGER NOT NULL);
   INSERT INTO fts_progress VALUES (0);`,
  // A run's chunks in id order, for cursor reads (readChunks): (run_id) entries are ordered by rowid within a run.
  "CREATE INDEX chunks_by_run ON chunks (run_id)",
  "CREATE TABLE attachments (run_id TEXT NOT NULL, name TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (run_id, name))",
]

const busyTimeoutMs = 5_000
/** Both connections, the store's and its writer's; NORMAL, since a stream of output cannot wait for a sync per commit. */
const databaseOptions = { what: "the log store", busyTimeoutMs, synchronous: "NORMAL" } as const
/** Queued output is handed to the writer once per event-loop turn, or sooner once this many bytes are queued. */
const batchBytes = 1 << 20
/** Output handed over but not yet written; beyond it append() waits for the writer, so memory stays bounded. */
const maxInFlightBytes = 8 << 20
/**
 * Chunks of one stream written together are joined and cut into rows of
 * about this many bytes, at a line end where there is one. Row size is a trade:
 * smaller rows index slower (about 24 MB/s at 16 KiB against 34 at 64 KiB,
 * measured) but snippet() re-reads a whole row per hit (20 hits cost ≈6 ms
 * at 16 KiB, ≈58 at 64 KiB).
 */
const rowBytes = 16 << 10
/**
 * The longest a writer transaction stays open: how late a write becomes
 * durable, and how long another process's writer may wait for the lock.
 * Shorter transactions index slower (each commit closes an FTS5 segment).
 */
const transactionMs = 50
/**
 * Indexing waits until no output has arrived for this long. Indexing costs more
 * CPU per MB than ingest, and on two cores indexing beside a full-speed stream
 * slows the stream itself (measured: 63 against 88 MB/s through Docker's attach).
 */
const indexIdleMs = 250
/** Output that keeps coming is indexed anyway once it has waited this long: search lags ingest by about this much. */
const maxIndexLagMs = 1_000
/** The writer copies the WAL into the database file after about this much output: SQLite's default, 1000 pages. */
const checkpointBytes = 4 << 20
const defaultSearchLimit = 20
/** Queries with at most this many matching rows (of 16 KiB at most each) are ranked by BM25; more, newest first. */
const rankWindow = 1_000
const defaultReadLimit = 1000
/** Beyond this many runs with writes on their way, the committed ones are forgotten. */
const maxUnsyncedRuns = 64
const writerRole = "runnel-log-writer"
const readerRole = "runnel-log-reader"

/** Counts what the store is given to keep: the bytes of each appended text (UTF-8, as SQLite stores it). */
export type StoredBytes = { inc(bytes: number): void }

/**
 * Opens (creating or migrating) the log store in the SQLite file at `path`; `:memory:` for a private store.
 * `storedBytes`, when given, counts the output appended (a process's metrics).
 */
export async function openSqliteLogStore(path: string, storedBytes?: StoredBytes): Promise<LogStore> {
  const db = openDatabase(path, databaseOptions)
  try {
    migrate(db, migrations)
    const [writer, reader] =
      path === ":memory:"
        ? [inlineWriter(db), inlineReader(db)]
        : [threadWriter(path, db.prepare(anyUnindexed).get()?.found === 1), threadReader(path)]
    return new SqliteLogStore(path, db, writer, reader, storedBytes)
  } catch (error) {
    db.close()
    throw error
  }
}

/** Where a chunk's text is in its batch's `text`: the `bytes` after the chunks before it. */
type Chunk = { runId: string; path: string; stream: OutputStream; bytes: number }
/**
 * Writes in the order the store received them; `seq` counts batches from 1.
 * The chunks' text travels as UTF-8 in one buffer that is moved to the writer,
 * not copied: as strings, every chunk was copied into the message and again out
 * of it, and the writer's collector had to free each (≈30% of its time went to
 * that, the rows and the messages).
 */
type Batch = {
  seq: number
  tasks: TaskRecord[]
  chunks: Chunk[]
  text: Uint8Array<ArrayBuffer>
  forgotten: string[]
}

/**
 * Reads on the event loop's own connection; every write goes through a
 * Writer, so that ingest never waits for SQLite's write lock there.
 */
class SqliteLogStore implements LogStore {
  readonly #path: string
  readonly #db: DatabaseSync
  readonly #writer: Writer
  readonly #selectTasks: StatementSync
  readonly #selectOutput: StatementSync
  readonly #selectChunks: StatementSync
  readonly #selectBytesAfter: StatementSync
  readonly #selectLastChunkId: StatementSync
  readonly #reader: Reader
  readonly #attach: StatementSync
  readonly #attachment: StatementSync
  #tasks: TaskRecord[] = []
  #forgotten: string[] = []
  #chunks: Chunk[] = []
  /** The queued chunks' text, UTF-8, with room to spare. */
  #text = Buffer.allocUnsafeSlow(0)
  #queuedBytes = 0
  #scheduled: NodeJS.Immediate | undefined
  #seq = 0
  /** Runs with writes that may not be committed yet, and the batch that carries their last write. */
  readonly #unsynced = new Map<string, number>()
  /** Runs with output the writer could not store, and why; kept until asked for. */
  readonly #lost = new Map<string, SystemError>()
  #failure: Error | undefined
  #closed: Promise<void> | undefined
  readonly #storedBytes: StoredBytes | undefined

  constructor(path: string, db: DatabaseSync, writer: Writer, reader: Reader, storedBytes: StoredBytes | undefined) {
    this.#path = path
    this.#storedBytes = storedBytes
    this.#db = db
    this.#writer = writer
    this.#reader = reader
    this.#selectTasks = db.prepare(
      "SELECT run_id, path, name, status, code, started_at, ended_at FROM tasks WHERE run_id = ? ORDER BY seq",
    )
    this.#selectOutput = db.prepare("SELECT text FROM chunks WHERE run_id = ? AND path = ? AND stream = ? ORDER BY id")
    this.#selectChunks = db.prepare(
      "SELECT id, path, stream, text FROM chunks INDEXED BY chunks_by_run WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?",
    )
    // octet_length() of a TEXT value is read from the row's header: no overflow page of the text is loaded.
    this.#selectBytesAfter = db.prepare(
      `SELECT coalesce(sum(bytes), 0) AS bytes FROM
         (SELECT octet_length(text) AS bytes FROM chunks INDEXED BY chunks_by_run WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?)`,
    )
    this.#selectLastChunkId = db.prepare("SELECT max(id) AS id FROM chunks INDEXED BY chunks_by_run WHERE run_id = ?")
    this.#attach = db.prepare("INSERT OR REPLACE INTO attachments (run_id, name, data) VALUES (?, ?, ?)")
    this.#attachment = db.prepare("SELECT data FROM attachments WHERE run_id = ? AND name = ?")
  }

  // Written on this connection, not the writer's batches: the caller needs it committed before it goes on.
  attach(runId: string, name: string, data: string): void {
    this.#assertOpen()
    this.#attach.run(runId, name, data)
  }

  attachment(runId: string, name: string): string | undefined {
    const row = this.#attachment.get(runId, name)
    return row === undefined ? undefined : String(row.data)
  }

  saveTask(record: TaskRecord): void {
    this.#assertOpen()
    this.#tasks.push(record)
    this.#schedule()
  }

  append(runId: string, path: string, stream: OutputStream, text: string): void {
    this.#assertOpen()
    if (text === "") return
    // Encoded as it comes, into room for the most bytes a UTF-16 unit can take (3): no pass only to count them.
    // Joining and cutting rows happens in the writer.
    if (this.#text.length - this.#queuedBytes < 3 * text.length) this.#makeRoom(3 * text.length)
    const bytes = this.#text.write(text, this.#queuedBytes)
    this.#chunks.push({ runId, path, stream, bytes })
    this.#queuedBytes += bytes
    this.#storedBytes?.inc(bytes)
    if (this.#queuedBytes >= batchBytes) this.#send()
    else this.#schedule()
  }

  forget(runId: string): void {
    this.#assertOpen()
    this.#forgotten.push(runId)
    this.#schedule()
  }

  tasks(runId: string): TaskRecord[] {
    this.#sync(runId)
    return this.#selectTasks.all(runId).map((row) => ({
      runId: String(row.run_id),
      path: String(row.path),
      name: String(row.name),
      status: String(row.status) as TaskStatus,
      code: row.code === null ? null : Number(row.code),
      startedAt: row.started_at === null ? null : String(row.started_at),
      endedAt: row.ended_at === null ? null : String(row.ended_at),
    }))
  }

  output(runId: string, path: string, stream: OutputStream): string {
    this.#sync(runId)
    return this.#selectOutput
      .all(runId, path, stream)
      .map((row) => String(row.text))
      .join("")
  }

  readChunks(runId: string, afterId: number, limit = defaultReadLimit): StoredChunk[] {
    this.#sync(runId)
    return this.#selectChunks.all(runId, afterId, limit).map((row) => ({
      id: Number(row.id),
      path: String(row.path),
      stream: String(row.stream) as OutputStream,
      text: String(row.text),
    }))
  }

  // No #sync: how far behind a reader is need not wait for writes on their way.
  bytesAfter(runId: string, afterId: number, maxRows: number): number {
    return Number(this.#selectBytesAfter.get(runId, afterId, maxRows)?.bytes ?? 0)
  }

  lastChunkId(runId: string): number {
    return Number(this.#selectLastChunkId.get(runId)?.id ?? 0)
  }

  search(request: SearchRequest): Promise<SearchPage> {
    this.#assertOpen()
    return this.#reader.search(request)
  }

  outputPage(runId: string, path: string, stream: OutputStream, offset: number, limit: number): Promise<OutputPage> {
    this.#assertOpen()
    // Committed first, so that the reader's connection sees every write made before this call.
    this.#sync(runId)
    return this.#reader.outputPage({ runId, path, stream, offset, limit })
  }

  commit(runId: string): void {
    this.#assertOpen()
    this.#sync(runId)
  }

  lostOutput(runId: string): SystemError | undefined {
    this.#sync(runId)
    for (const { runIds, reason } of this.#writer.lost()) {
      const error = new SystemError(
        `the log store is full: output of this run could not be stored in ${this.#path} (${reason}); free space on its disk, then run it again`,
      )
      for (const id of runIds) if (!this.#lost.has(id)) this.#lost.set(id, error)
    }
    const lost = this.#lost.get(runId)
    this.#lost.delete(runId)
    return lost
  }

  async flush(): Promise<void> {
    this.#send()
    await this.#writer.indexed(this.#seq)
  }

  close(): Promise<void> {
    this.#closed ??= this.#close()
    return this.#closed
  }

  async #close(): Promise<void> {
    try {
      await this.flush()
    } finally {
      clearImmediate(this.#scheduled)
      await Promise.all([this.#writer.close(), this.#reader.close()])
      this.#db.close()
    }
  }

  #assertOpen(): void {
    if (this.#closed !== undefined) throw new Error("the log store is closed")
    if (this.#failure !== undefined) throw this.#failure
  }

  #schedule(): void {
    this.#scheduled ??= setImmediate(() => {
      try {
        this.#send()
      } catch (error) {
        // Thrown here it would be an uncaught exception; the next call reports it instead.
        this.#failure = new SystemError(`the log store could not save output: ${errorMessage(error)}`, { cause: error })
      }
    })
  }

  /** Hands the queued writes to the writer. */
  #send(): void {
    clearImmediate(this.#scheduled)
    this.#scheduled = undefined
    if (this.#failure !== undefined) throw this.#failure
    if (this.#tasks.length === 0 && this.#chunks.length === 0 && this.#forgotten.length === 0) return
    const batch: Batch = {
      seq: ++this.#seq,
      tasks: this.#tasks,
      chunks: this.#chunks,
      text: new Uint8Array(this.#text.buffer, 0, this.#queuedBytes),
      forgotten: this.#forgotten,
    }
    for (const { runId } of batch.tasks) this.#unsynced.set(runId, batch.seq)
    for (const { runId } of batch.chunks) this.#unsynced.set(runId, batch.seq)
    if (this.#unsynced.size > maxUnsyncedRuns) {
      const committed = this.#writer.committedSeq()
      for (const [runId, seq] of this.#unsynced) if (seq <= committed) this.#unsynced.delete(runId)
    }
    this.#tasks = []
    this.#chunks = []
    this.#forgotten = []
    this.#text = Buffer.allocUnsafeSlow(0)
    this.#queuedBytes = 0
    this.#writer.write(batch)
  }

  /**
   * A larger buffer for the queued text, with `room` bytes free. Its own memory (allocUnsafeSlow, not a slice of
   * Buffer's shared pool), so that it can be moved to the writer. A batch is sent once it holds batchBytes, so one
   * buffer of that and a chunk's room usually takes a whole batch.
   */
  #makeRoom(room: number): void {
    const text = Buffer.allocUnsafeSlow(Math.max(batchBytes, this.#queuedBytes) + room)
    this.#text.copy(text, 0, 0, this.#queuedBytes)
    this.#text = text
  }

  /**
   * Reads of a run see every write to it made before them. Only a run with
   * writes still on their way waits: under heavy output a commit can take
   * tens of ms, and reads of other runs need not block the event loop for it.
   */
  #sync(runId: string): void {
    if (this.#tasks.some((task) => task.runId === runId) || this.#chunks.some((chunk) => chunk.runId === runId)) {
      this.#send()
    }
    const seq = this.#unsynced.get(runId)
    if (seq === undefined) return
    this.#writer.committed(seq)
    this.#unsynced.delete(runId)
  }
}

/** Writes the store's batches and fills chunks_fts behind them. */
type Writer = {
  /**
   * Takes a batch, and its text's memory: the caller's view of it may be detached. It is committed soon after.
   * May block while too much output is waiting to be written.
   */
  write(batch: Batch): void
  /** Blocks until batches through `seq` are committed. */
  committed(seq: number): void
  /** The last batch committed, without waiting. */
  committedSeq(): number
  /** Resolves once the chunks of batches through `seq` are indexed. */
  indexed(seq: number): Promise<void>
  /** Writes given up since the last call (committed() counts them as done): whose, and why. */
  lost(): LostWrites[]
  close(): Promise<void>
}

/** Batches the writer gave up (the disk was full), rolled back whole: the runs they carried output or tasks of. */
type LostWrites = { lost: true; runIds: string[]; reason: string }

/** One row, `found`: 1 when some chunk is not yet in chunks_fts. */
const anyUnindexed =
  "SELECT EXISTS (SELECT 1 FROM chunks WHERE id > (SELECT indexed_through FROM fts_progress)) AS found"

/**
 * The statements of a writer connection. fts_progress is read and advanced
 * inside the writer's transactions, which is what keeps the writers of two
 * processes from indexing a chunk twice.
 */
function writeStatements(db: DatabaseSync) {
  // The text is bound as the UTF-8 bytes it came in, and stored as TEXT as it is: no string is made of it here.
  const insertChunk = db.prepare("INSERT INTO chunks (run_id, path, stream, text) VALUES (?, ?, ?, CAST(? AS TEXT))")
  // seq is given on the first save only, so a task keeps its place when its record is replaced.
  const upsertTask = db.prepare(
    `INSERT INTO tasks (run_id, path, name, status, code, started_at, ended_at, seq)
     VALUES ($runId, $path, $name, $status, $code, $startedAt, $endedAt,
             (SELECT coalesce(max(seq), 0) + 1 FROM tasks WHERE run_id = $runId))
     ON CONFLICT (run_id, path) DO UPDATE SET name = excluded.name, status = excluded.status, code = excluded.code,
       started_at = excluded.started_at, ended_at = excluded.ended_at`,
  )
  const selectProgress = db.prepare("SELECT indexed_through FROM fts_progress")
  const updateProgress = db.prepare("UPDATE fts_progress SET indexed_through = ?")
  const selectUnindexed = db.prepare("SELECT id FROM chunks WHERE id > ? ORDER BY id LIMIT 1")
  const selectAnyUnindexed = db.prepare(anyUnindexed)
  const index = db.prepare("INSERT INTO chunks_fts (rowid, text) SELECT id, text FROM chunks WHERE id = ?")
  // An external-content index must be told the text of each row it drops; rows not yet indexed are simply deleted.
  const unindexRun = db.prepare(
    `INSERT INTO chunks_fts (chunks_fts, rowid, text) SELECT 'delete', id, text FROM chunks INDEXED BY chunks_by_run
     WHERE run_id = ? AND id <= (SELECT indexed_through FROM fts_progress)`,
  )
  const lastChunkThrough = db.prepare("SELECT coalesce(max(id), 0) AS id FROM chunks WHERE id <= ?")
  const forgetRun = ["chunks", "tasks", "attachments"].map((table) =>
    db.prepare(`DELETE FROM ${table} WHERE run_id = ?`),
  )
  return {
    /** Writes a batch; returns the id of its last chunk, 0 if it has none. */
    apply(batch: Batch): number {
      for (const { runId, path, name, status, code, startedAt, endedAt } of batch.tasks) {
        upsertTask.run({ runId, path, name, status, code, startedAt, endedAt })
      }
      let lastId = 0
      for (const row of toRows(batch)) {
        const text = batch.text.subarray(row.start, row.end)
        lastId = Number(insertChunk.run(row.runId, row.path, row.stream, text).lastInsertRowid)
      }
      for (const runId of batch.forgotten) {
        unindexRun.run(runId)
        for (const statement of forgetRun) statement.run(runId)
      }
      return lastId
    },
    /** The last chunk at or before `id` still stored: what a batch waits to be indexed once forget() took its tail. */
    lastChunkThrough: (id: number) => Number(lastChunkThrough.get(id)?.id ?? 0),
    progress: () => Number(selectProgress.get()?.indexed_through ?? 0),
    hasUnindexed: () => selectAnyUnindexed.get()?.found === 1,
    setProgress: (id: number) => updateProgress.run(id),
    /** Indexes the chunk after `id`; returns its id, or undefined when every chunk is indexed. */
    indexAfter(id: number): number | undefined {
      const next = selectUnindexed.get(id)?.id
      if (next === undefined) return undefined
      index.run(next)
      return Number(next)
    },
  }
}

type Row = { runId: string; path: string; stream: OutputStream; start: number; end: number }

/**
 * Joins consecutive chunks of one stream, so that chatty output does not cost
 * a row per write, and cuts them into rows of rowBytes at most, each ending at
 * a line end where its second half has one (search cannot find a word that
 * two rows split between them), and never inside a character. Rows are
 * ranges of the batch's text.
 */
function toRows({ chunks, text }: Batch): Row[] {
  const rows: Row[] = []
  let row: Row | undefined
  let at = 0
  for (const { runId, path, stream, bytes } of chunks) {
    if (row !== undefined && row.runId === runId && row.path === path && row.stream === stream) {
      row.end += bytes
    } else {
      if (row !== undefined) rows.push(row)
      row = { runId, path, stream, start: at, end: at + bytes }
    }
    at += bytes
    while (row.end - row.start > rowBytes) {
      const lineEnd = text.lastIndexOf(0x0a, row.start + rowBytes - 1)
      let end = lineEnd >= row.start + rowBytes / 2 ? lineEnd + 1 : row.start + rowBytes
      // A UTF-8 continuation byte (10xxxxxx) would begin the next row inside a character.
      while (((text[end] ?? 0) & 0xc0) === 0x80) end--
      rows.push({ ...row, end })
      row.start = end
    }
  }
  if (row !== undefined) rows.push(row)
  return rows
}

/** For `:memory:` stores, which no second connection can open: each batch is written and indexed at once. */
function inlineWriter(db: DatabaseSync): Writer {
  const statements = writeStatements(db)
  return {
    write(batch) {
      transaction(db, () => {
        statements.apply(batch)
        let progress = statements.progress()
        for (let id = statements.indexAfter(progress); id !== undefined; id = statements.indexAfter(progress)) {
          progress = id
        }
        statements.setProgress(progress)
      })
    },
    committed() {},
    committedSeq: () => Number.POSITIVE_INFINITY,
    indexed: async () => {},
    // A failed write throws from write() itself: memory has no disk to fill.
    lost: () => [],
    close: async () => {},
  }
}

type PageRequest = { runId: string; path: string; stream: OutputStream; offset: number; limit: number }

/** Reads that may take long: each answers on another thread than the caller's (but for `:memory:`). */
type Reader = {
  search(request: SearchRequest): Promise<SearchPage>
  outputPage(request: PageRequest): Promise<OutputPage>
  close(): Promise<void>
}

/**
 * FTS5 query text that matches rows holding every word of `query`, each word
 * quoted as a string: whatever FTS5 syntax the query held (quotes, `*`, `:`,
 * `^`, parentheses, AND/OR/NOT/NEAR) is only a separator. Words are what the
 * unicode61 tokenizer keeps: letters, digits and the private-use and `_`-less
 * rest become separators too. Undefined when there is no word.
 */
function ftsWords(query: string): string | undefined {
  const words = queryWords(query)
  return words.length === 0 ? undefined : words.map((word) => `"${word}"`).join(" ")
}

const queryWords = (query: string) => query.match(/[\p{L}\p{N}\p{M}]+/gu) ?? []

/** Characters a snippet shows before and after the match it is cut around, about FTS5's 24 tokens in all. */
const snippetChars = { before: 60, after: 120 }

/**
 * `text` cut around a match of `words` (the place where the most of them occur within a snippet's
 * length), every word in it marked « », with "…" where it is cut; undefined when no word is found
 * here as FTS5 found it (FTS5 also folds diacritics), and FTS5's snippet() answers instead.
 * snippet() scores every window of a row: ≈1 ms for a 16 KiB row with a common word on every line,
 * most of the time a search for that word took, while this looks at a few matches.
 */
function snippetOf(text: string, words: readonly string[]): string | undefined {
  if (words.length === 0) return undefined
  const word = new RegExp(`(?<![\\p{L}\\p{N}\\p{M}])(?:${words.join("|")})(?![\\p{L}\\p{N}\\p{M}])`, "giu")
  // The first 200 matches are enough to choose from: a common word matches on every line.
  const matches: RegExpExecArray[] = []
  for (const match of text.matchAll(word)) if (matches.push(match) >= 200) break
  const distinct = new Set(words.map((each) => each.toLowerCase())).size
  let best: { at: number; count: number } | undefined
  for (const match of matches) {
    const near = matches.filter((other) => other.index >= match.index && other.index < match.index + snippetChars.after)
    const count = new Set(near.map((other) => other[0].toLowerCase())).size
    if (best === undefined || count > best.count) best = { at: match.index, count }
    if (count === distinct) break
  }
  if (best === undefined) return undefined
  // Cut at spaces, not inside a word, where there is one near the cut.
  let start = Math.max(0, best.at - snippetChars.before)
  const space = text.slice(start, best.at).search(/\s/)
  if (start > 0 && space >= 0) start += space + 1
  let end = Math.min(text.length, best.at + snippetChars.after)
  const lastSpace = text.slice(best.at, end).search(/\s\S*$/)
  if (end < text.length && lastSpace > 0) end = best.at + lastSpace
  const marked = text.slice(start, end).replace(word, (found) => `«${found}»`)
  return `${start > 0 ? "…" : ""}${marked}${end < text.length ? "…" : ""}`
}

/** The statements of a read connection: ranked search, and pages of a stream. */
function readStatements(db: DatabaseSync) {
  // The matching rows newest first: FTS5 walks a word's rows by rowid and stops at the LIMIT, so this costs
  // the same for a common word in 1 GiB as in 10 MB (measured: ≈3 ms for 1,001 rows of a word in every row).
  const newest = (filter: string) =>
    db.prepare(
      `SELECT chunks_fts.rowid AS id FROM chunks_fts ${filter === "" ? "" : "JOIN chunks c ON c.id = chunks_fts.rowid"}
       WHERE chunks_fts MATCH $match ${filter} ORDER BY chunks_fts.rowid DESC LIMIT $limit OFFSET $offset`,
    )
  const everywhere = newest("")
  const only = newest("AND c.run_id IN (SELECT value FROM json_each($runs))")
  const except = newest("AND c.run_id NOT IN (SELECT value FROM json_each($runs))")
  // One run's rows lie between its first and last id, a range FTS5 skips to instead of reading every hit.
  const oneRun =
    newest(`AND c.run_id = $run AND chunks_fts.rowid BETWEEN (SELECT min(id) FROM chunks WHERE run_id = $run)
                                                                 AND (SELECT max(id) FROM chunks WHERE run_id = $run)`)
  // BM25 reads every row of each word to weigh it (≈17 ms per 64 MB for a word in every row), so it ranks only
  // queries with at most rankWindow matching rows; more than that are answered newest first.
  const ranked = db.prepare(
    `SELECT rowid AS id FROM chunks_fts WHERE chunks_fts MATCH $match AND rowid IN (SELECT value FROM json_each($ids))
     ORDER BY rank, rowid DESC LIMIT $limit OFFSET $offset`,
  )
  const hit = db.prepare("SELECT run_id, path, stream, text FROM chunks WHERE id = ?")
  const ftsSnippet = db.prepare(
    `SELECT snippet(chunks_fts, 0, '«', '»', '…', 24) AS snippet FROM chunks_fts
     WHERE chunks_fts MATCH $match AND chunks_fts.rowid = $id`,
  )
  const ids = (rows: Record<string, SQLOutputValue>[]) => rows.map((row) => Number(row.id))
  const total = db.prepare(
    "SELECT coalesce(sum(length(text)), 0) AS total FROM chunks WHERE run_id = ? AND path = ? AND stream = ?",
  )
  // Each row's place in the stream, in characters, and the part of it the page covers.
  const slice = db.prepare(
    `SELECT substr(text, max($offset - start, 0) + 1, $end - max(start, $offset)) AS text FROM (
       SELECT text, sum(length(text)) OVER (ORDER BY id) - length(text) AS start
       FROM chunks WHERE run_id = $runId AND path = $path AND stream = $stream)
     WHERE start < $end AND start + length(text) > $offset ORDER BY start`,
  )
  return {
    search({ query, runIds, exceptRunIds, offset = 0, limit = defaultSearchLimit }: SearchRequest): SearchPage {
      const match = ftsWords(query)
      if (match === undefined || runIds?.length === 0) return { hits: [], hasMore: false }
      const [statement, scope] =
        runIds?.length === 1
          ? [oneRun, { run: runIds[0] ?? "" }]
          : runIds !== undefined
            ? [only, { runs: JSON.stringify(runIds) }]
            : exceptRunIds !== undefined && exceptRunIds.length > 0
              ? [except, { runs: JSON.stringify(exceptRunIds) }]
              : [everywhere, {}]
      const window = ids(statement.all({ match, ...scope, limit: rankWindow + 1, offset: 0 }))
      const page =
        window.length <= rankWindow
          ? ids(ranked.all({ match, ids: JSON.stringify(window), limit: limit + 1, offset }))
          : offset + limit < window.length
            ? window.slice(offset, offset + limit + 1)
            : ids(statement.all({ match, ...scope, limit: limit + 1, offset }))
      const words = queryWords(query)
      const hits = page.slice(0, limit).map((id): SearchHit => {
        const row = hit.get(id) ?? {}
        return {
          runId: String(row.run_id),
          path: String(row.path),
          stream: String(row.stream) as OutputStream,
          snippet: snippetOf(String(row.text), words) ?? String(ftsSnippet.get({ match, id })?.snippet),
        }
      })
      return { hits, hasMore: page.length > limit }
    },
    outputPage({ runId, path, stream, offset, limit }: PageRequest): OutputPage {
      const text = slice
        .all({ runId, path, stream, offset, end: offset + limit })
        .map((row) => String(row.text))
        .join("")
      return { text, total: Number(total.get(runId, path, stream)?.total ?? 0) }
    },
  }
}

/** For `:memory:` stores, which no second connection can open: reads run on the caller's connection. */
function inlineReader(db: DatabaseSync): Reader {
  const statements = readStatements(db)
  return {
    search: async (request) => statements.search(request),
    outputPage: async (request) => statements.outputPage(request),
    close: async () => {},
  }
}

type ToReader = { id: number; search: SearchRequest } | { id: number; page: PageRequest }
type FromReader = { id: number; result?: SearchPage | OutputPage; error?: string }
type ReaderData = { role: typeof readerRole; path: string }

/**
 * A thread with its own read connection, so that a search over a large store
 * (tens of ms for a common word per GiB) or a page deep in a long log never
 * stalls the event loop. Requests are answered in order, one at a time: a
 * queue of slow searches delays other searches, never ingest or webhooks. In
 * WAL mode this connection reads beside the writer's without waiting for it.
 * The thread starts with the first request, since a thread costs ≈11 MiB of
 * resident memory (measured) that a server nobody searches or pages need not
 * hold, and it is referenced only while a request is out, so an idle store
 * keeps no process alive.
 */
function threadReader(path: string): Reader {
  const pending = new Map<number, { resolve: (result: never) => void; reject: (error: Error) => void }>()
  let nextId = 0
  let failure: Error | undefined
  let started: { worker: Worker; exited: Promise<void> } | undefined
  const failAll = (reason: string) => {
    failure ??= new SystemError(`the log store's reader thread stopped: ${reason}`)
    for (const { reject } of pending.values()) reject(failure)
    pending.clear()
  }
  const start = () => {
    const worker = new Worker(new URL(import.meta.url), { workerData: { role: readerRole, path } satisfies ReaderData })
    worker.on("message", ({ id, result, error }: FromReader) => {
      const waiter = pending.get(id)
      pending.delete(id)
      if (pending.size === 0) worker.unref()
      if (error !== undefined) waiter?.reject(new SystemError(`the log store could not read: ${error}`))
      else waiter?.resolve(result as never)
    })
    worker.on("error", (error) => failAll(errorMessage(error)))
    const exited = new Promise<void>((resolve) =>
      worker.once("exit", (code) => {
        failAll(`it exited with code ${code}`)
        resolve()
      }),
    )
    return { worker, exited }
  }
  const ask = <T>(request: Omit<ToReader, "id">): Promise<T> => {
    if (failure !== undefined) return Promise.reject(failure)
    started ??= start()
    const id = ++nextId
    started.worker.ref()
    return new Promise<T>((resolve, reject) => {
      pending.set(id, { resolve: resolve as (result: never) => void, reject })
      // Posted before the thread is online is fine: a worker's messages wait for it.
      started?.worker.postMessage({ id, ...request })
    })
  }
  return {
    search: (search) => ask<SearchPage>({ search }),
    outputPage: (page) => ask<OutputPage>({ page }),
    async close() {
      failure ??= new SystemError("the log store is closed")
      if (started === undefined) return
      await started.worker.terminate()
      await started.exited
    },
  }
}

/** The reader thread's nice value: searches yield the CPU to the event loop (webhooks, runs) when both want it. */
const readerNice = 10

function runReader(path: string, store: MessagePort): void {
  // On Linux a nice value belongs to a thread, and pid 0 is the calling one: this lowers the reader alone.
  // Elsewhere it may lower the whole process, or fail; either way searches still run.
  if (process.platform === "linux") {
    try {
      setPriority(0, readerNice)
    } catch {
      // Not permitted here: the reader runs at the process's priority.
    }
  }
  const db = openDatabase(path, databaseOptions)
  const statements = readStatements(db)
  store.on("message", (message: ToReader) => {
    try {
      const result = "search" in message ? statements.search(message.search) : statements.outputPage(message.page)
      store.postMessage({ id: message.id, result } satisfies FromReader)
    } catch (error) {
      store.postMessage({ id: message.id, error: errorMessage(error) } satisfies FromReader)
    }
  })
}

/** Int32 slots shared between the store and its writer thread. */
const slots = {
  /** Bumped by the store after each message, so an idle writer wakes up. */
  bell: 0,
  /** The last batch the writer has written (committed or not): its message is no longer held in memory. */
  applied: 1,
  /** The last batch the writer has committed. */
  committed: 2,
  /** A batch the store waits to see committed: the writer commits early for it. */
  wanted: 3,
  /** 1 once the writer thread has failed. */
  failed: 4,
} as const

type ToWriter = Batch | { type: "stop" }
type FromWriter = { indexedSeq: number }
type WriterData = { role: typeof writerRole; path: string; shared: Int32Array; batches: MessagePort }

/**
 * FTS5 indexing costs ≈30 ms of CPU per MB, more than ingest can afford on
 * the event loop, and a second connection indexing beside the event loop's
 * own writes would make those writes wait for the write lock, behind FTS5's
 * commits and segment merges (measured: ≈3.5 ms of event loop per MB). So a
 * writer thread owns every write: it writes each batch as it arrives and
 * indexes chunks in between, one by one, in transactions of at most
 * transactionMs. The event loop only encodes each chunk into its batch's
 * buffer, which is moved to the writer, not copied. The thread starts with
 * the first write, or at once when output an earlier process stored is left
 * to index: a thread costs ≈11 MiB of resident memory (measured) that a
 * server with nothing to write need not hold. It is referenced only while
 * someone waits for it, so an idle store does not keep the process alive.
 */
function threadWriter(path: string, startNow: boolean): Writer {
  const shared = new Int32Array(new SharedArrayBuffer(5 * Int32Array.BYTES_PER_ELEMENT))
  const { port1: batches, port2: writerBatches } = new MessageChannel()
  const waiters: { seq: number; resolve: () => void; reject: (error: Error) => void }[] = []
  let indexedSeq = 0
  let failure: Error | undefined
  let started: { worker: Worker; exited: Promise<void> } | undefined
  const settle = () => {
    for (const waiter of waiters.filter((waiter) => failure !== undefined || waiter.seq <= indexedSeq)) {
      if (failure === undefined) waiter.resolve()
      else waiter.reject(failure)
      waiters.splice(waiters.indexOf(waiter), 1)
    }
    if (waiters.length === 0) started?.worker.unref()
  }
  const fail = (reason: string) => {
    failure ??= new SystemError(`the log store's writer thread stopped: ${reason}`)
    settle()
  }
  /** The thread, started on first use: messages posted before it is online wait for it. */
  const thread = () => {
    if (started !== undefined) return started
    const writerData: WriterData = { role: writerRole, path, shared, batches: writerBatches }
    const worker = new Worker(new URL(import.meta.url), {
      workerData: writerData,
      transferList: [writerBatches],
      // Each batch arrives as fresh strings that are garbage once written; a small young generation collects them
      // before they add up (RSS growth appending 256 MB at full speed, opening included: ≈57 MiB, ≈67 with V8's default).
      resourceLimits: { maxYoungGenerationSizeMb: 4 },
    })
    worker.on("message", (message: FromWriter) => {
      indexedSeq = message.indexedSeq
      settle()
    })
    worker.on("error", (error) => fail(errorMessage(error)))
    worker.on("exit", (code) => fail(`it exited with code ${code}`))
    worker.unref()
    started = { worker, exited: new Promise<void>((resolve) => worker.once("exit", () => resolve())) }
    return started
  }
  if (startNow) thread()

  const post = (message: ToWriter, transfer: TransferListItem[] = []) => {
    thread()
    batches.postMessage(message, transfer)
    Atomics.add(shared, slots.bell, 1)
    Atomics.notify(shared, slots.bell)
  }
  /** Blocks the event loop until `slot` reaches `seq`. */
  const waitFor = (slot: number, seq: number) => {
    const deadline = performance.now() + busyTimeoutMs
    for (let seen = Atomics.load(shared, slot); seen < seq; seen = Atomics.load(shared, slot)) {
      if (failure !== undefined) throw failure
      if (Atomics.load(shared, slots.failed) === 1) throw new SystemError("the log store's writer thread failed")
      const leftMs = deadline - performance.now()
      if (leftMs <= 0) throw new SystemError(`the log store's writer did not write within ${busyTimeoutMs} ms`)
      Atomics.wait(shared, slot, seen, leftMs)
    }
  }
  const inFlight: { seq: number; bytes: number }[] = []
  let inFlightBytes = 0
  return {
    write(batch) {
      if (failure !== undefined) throw failure
      // The whole buffer, room to spare included, is memory held until the writer is done with it.
      const bytes = batch.text.buffer.byteLength
      post(batch, [batch.text.buffer])
      inFlight.push({ seq: batch.seq, bytes })
      inFlightBytes += bytes
      while (inFlightBytes > maxInFlightBytes) {
        const oldest = inFlight[0]
        if (oldest === undefined) break
        if (oldest.seq > Atomics.load(shared, slots.applied)) waitFor(slots.applied, oldest.seq)
        inFlight.shift()
        inFlightBytes -= oldest.bytes
      }
    },
    committedSeq: () => Atomics.load(shared, slots.committed),
    lost() {
      const found: LostWrites[] = []
      // Posted before the writer counts the batches committed, so whoever waited for that finds them here.
      for (
        let received = receiveMessageOnPort(batches);
        received !== undefined;
        received = receiveMessageOnPort(batches)
      ) {
        found.push(received.message as LostWrites)
      }
      return found
    },
    committed(seq) {
      if (Atomics.load(shared, slots.committed) >= seq) return
      Atomics.store(shared, slots.wanted, seq)
      waitFor(slots.committed, seq)
    },
    indexed(seq) {
      if (seq <= indexedSeq) return Promise.resolve()
      if (failure !== undefined) return Promise.reject(failure)
      thread().worker.ref()
      return new Promise((resolve, reject) => waiters.push({ seq, resolve, reject }))
    },
    async close() {
      if (started !== undefined) {
        // Referenced again, or the process could exit before the writer has committed and closed.
        started.worker.ref()
        post({ type: "stop" })
        await started.exited
      }
      batches.close()
    },
  }
}

function runWriter(path: string, shared: Int32Array, batches: MessagePort, store: MessagePort): void {
  const db = openDatabase(path, databaseOptions)
  try {
    // Checkpoints run below, after a commit is announced, so that reads waiting for it do not wait for them too.
    db.exec("PRAGMA wal_autocheckpoint = 0")
    writeLoop(db, shared, batches, store)
  } catch (error) {
    Atomics.store(shared, slots.failed, 1)
    Atomics.notify(shared, slots.applied)
    Atomics.notify(shared, slots.committed)
    throw error
  } finally {
    db.close()
  }
}

function writeLoop(db: DatabaseSync, shared: Int32Array, batches: MessagePort, store: MessagePort): void {
  const statements = writeStatements(db)
  const checkpoint = db.prepare("PRAGMA wal_checkpoint(PASSIVE)")
  /** Batches written but not yet wholly indexed, with the id of their last chunk. */
  const unindexed: { seq: number; lastId: number; atMs: number }[] = []
  let appliedSeq = 0
  let committedSeq = 0
  let open = false
  let openedAt = 0
  let progress = 0
  let uncheckpointedBytes = 0
  let stopping = false
  let lastBatchAt = Number.NEGATIVE_INFINITY
  /** Batches written in the open transaction, and the runs each carries: what a failed commit loses. */
  let pending: { seq: number; runIds: Set<string> }[] = []

  const begin = () => {
    db.exec("BEGIN IMMEDIATE")
    open = true
    openedAt = performance.now()
    progress = statements.progress()
  }
  /** Tells the store which batches are wholly indexed, by this writer or another process's. */
  const report = () => {
    let indexedSeq = 0
    while (unindexed[0] !== undefined && unindexed[0].lastId <= progress) indexedSeq = unindexed.shift()?.seq ?? 0
    if (indexedSeq > 0) store.postMessage({ indexedSeq } satisfies FromWriter)
  }
  const commit = () => {
    statements.setProgress(progress)
    db.exec("COMMIT")
    open = false
    pending = []
    committedSeq = appliedSeq
    Atomics.store(shared, slots.committed, committedSeq)
    Atomics.notify(shared, slots.committed)
    report()
    // Here, between this writer's transactions, a checkpoint copies every frame and the WAL starts over. One on
    // another connection, beside a busy writer, never catches up, and the WAL grows as long as output comes.
    if (uncheckpointedBytes >= checkpointBytes) {
      try {
        checkpoint.get()
        uncheckpointedBytes = 0
      } catch (error) {
        // The file could not grow: the WAL keeps every frame, and the next commit tries again.
        if (!isFull(error)) throw error
      }
    }
  }
  /**
   * The disk is full: the open transaction is rolled back (SQLite may have
   * done so already), its batches are given up and reported, whose runs they
   * carried and why, before they count as committed, so that a store waiting
   * for them goes on. The writer lives on: once there is room, writes succeed again.
   */
  const giveUp = (error: unknown) => {
    if (db.isTransaction) db.exec("ROLLBACK")
    open = false
    const runIds = new Set(pending.flatMap((batch) => [...batch.runIds]))
    const seqs = new Set(pending.map((batch) => batch.seq))
    appliedSeq = Math.max(appliedSeq, ...seqs)
    pending = []
    for (let i = unindexed.length - 1; i >= 0; i--) if (seqs.has(unindexed[i]?.seq ?? 0)) unindexed.splice(i, 1)
    if (runIds.size > 0) {
      const { errstr } = error as { errstr?: string }
      batches.postMessage({
        lost: true,
        runIds: [...runIds],
        reason: `SQLITE_FULL: ${errstr ?? errorMessage(error)}`,
      } satisfies LostWrites)
    }
    Atomics.store(shared, slots.applied, appliedSeq)
    Atomics.notify(shared, slots.applied)
    committedSeq = appliedSeq
    Atomics.store(shared, slots.committed, committedSeq)
    Atomics.notify(shared, slots.committed)
    progress = statements.progress()
    report()
  }

  for (;;) {
    const rung = Atomics.load(shared, slots.bell)
    // While the store keeps sending, this could go on receiving for ever: the transaction's age ends it.
    while (!open || performance.now() - openedAt < transactionMs) {
      const received = receiveMessageOnPort(batches)
      if (received === undefined) break
      const message = received.message as ToWriter
      if ("type" in message) {
        stopping = true
        continue
      }
      if (!open) begin()
      lastBatchAt = performance.now()
      const bytes = message.text.byteLength
      const runIds = new Set([...message.tasks, ...message.chunks].map((write) => write.runId))
      pending.push({ seq: message.seq, runIds })
      let lastId: number
      try {
        // Forgetting unindexes what the table says is indexed: it must say what this transaction indexed too.
        if (message.forgotten.length > 0) statements.setProgress(progress)
        lastId = statements.apply(message)
      } catch (error) {
        if (!isFull(error)) throw error
        giveUp(error)
        continue
      } finally {
        // Its bytes are in SQLite's pages now. Detaching frees them at once: this thread makes little garbage
        // besides, so its collector would run seldom, and the batches would pile up until it did.
        message.text.buffer.transfer(0)
      }
      unindexed.push({ seq: message.seq, lastId, atMs: lastBatchAt })
      // A forgotten run's chunks that were waiting to be indexed are gone: no batch waits for them any more.
      if (message.forgotten.length > 0)
        for (const batch of unindexed) batch.lastId = statements.lastChunkThrough(batch.lastId)
      uncheckpointedBytes += bytes
      appliedSeq = message.seq
      Atomics.store(shared, slots.applied, appliedSeq)
      Atomics.notify(shared, slots.applied)
    }
    const quietForMs = performance.now() - lastBatchAt
    // Quiet, or output that has waited too long: a stream that never pauses is still searchable within a second.
    const lagMs = unindexed[0] === undefined ? 0 : performance.now() - unindexed[0].atMs
    const quiet = quietForMs >= indexIdleMs || lagMs >= maxIndexLagMs
    // Chunks left unindexed by a process that ended are taken up here too: progress is shared in the file.
    let indexed: number | undefined
    try {
      if (!open && !stopping && quiet && statements.hasUnindexed()) begin()
      indexed = open && !stopping && quiet ? statements.indexAfter(progress) : undefined
      if (indexed !== undefined) {
        progress = indexed
        // Indexing writes index pages to the WAL too: counted as a row of text, about what the WAL measured.
        uncheckpointedBytes += rowBytes
      }
      if (
        open &&
        (indexed === undefined ||
          Atomics.load(shared, slots.wanted) > committedSeq ||
          performance.now() - openedAt >= transactionMs)
      ) {
        commit()
      }
    } catch (error) {
      if (!isFull(error)) throw error
      giveUp(error)
      indexed = undefined
    }
    if (stopping) return
    if (!open && indexed === undefined) {
      if (unindexed.length > 0) {
        progress = statements.progress()
        report()
      }
      // Output arrived moments ago: wake when it has been quiet long enough to index, or at the next batch.
      Atomics.wait(
        shared,
        slots.bell,
        rung,
        quiet ? Number.POSITIVE_INFINITY : Math.min(indexIdleMs - quietForMs, maxIndexLagMs - lagMs),
      )
    }
  }
}

/** SQLITE_FULL (13, with any extended code): the disk, or the file's size limit, is full. */
function isFull(error: unknown): boolean {
  const code = (error as { errcode?: unknown } | undefined)?.errcode
  return typeof code === "number" && (code & 0xff) === 13
}

if (!isMainThread && parentPort !== null) {
  const data = workerData as { role?: string; path?: string } | undefined
  if (data?.role === writerRole) {
    const { path, shared, batches } = data as Partial<WriterData>
    if (path !== undefined && shared !== undefined && batches !== undefined)
      runWriter(path, shared, batches, parentPort)
  } else if (data?.role === readerRole && data.path !== undefined) {
    runReader(data.path, parentPort)
  }
}
