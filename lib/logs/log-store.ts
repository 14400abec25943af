import type { SystemError } from "../core/errors.ts"
import type { OutputStream, TaskRecord } from "../core/run.ts"

/**
 * Task records and their output, stored as it arrives. Every text handed to
 * the store is already redacted. Writes return at once and cost the caller
 * little (they are queued and committed in groups), and the queue is bounded,
 * so a task's output never piles up in memory. Reads of a run see every write
 * to that run made before them.
 */
export interface LogStore {
  /** Inserts or replaces the record of one task (keyed by run id and path). */
  saveTask(record: TaskRecord): void
  /** Appends output of one task; chunks of one stream keep their order. */
  append(runId: string, path: string, stream: OutputStream, text: string): void
  /** The tasks of a run in the order they were first saved, which is the order they started; [] for an unknown run. */
  tasks(runId: string): TaskRecord[]
  /** The whole stored output of one stream of one task; "" when there is none. */
  output(runId: string, path: string, stream: OutputStream): string
  /**
   * The run's stored output after the chunk `afterId` (0: from the start), in
   * the order it was stored, across tasks and streams: at most `limit` chunks
   * (default 1000). A chunk's id is a cursor that only grows: a later read
   * after the last id seen returns exactly what was stored since, never a
   * chunk twice. Chunks may be joined or cut differently from the appends
   * that made them, but each stream's text is the same.
   */
  readChunks(runId: string, afterId: number, limit?: number): StoredChunk[]
  /**
   * Bytes (UTF-8) of the run's committed output after the chunk `afterId`,
   * counting at most `maxRows` rows (of 16 KiB at most each): how far a reader
   * at that cursor is behind. Reads no text, only the rows' lengths.
   */
  bytesAfter(runId: string, afterId: number, maxRows: number): number
  /** The id of the run's newest committed chunk; 0 when it has none. */
  lastChunkId(runId: string): number
  /**
   * Full-text search over stored output: ranked by BM25 when at most 1,000
   * rows match, newest first when more do (ranking a word found everywhere
   * costs time in proportion to the store, and recency is then the better
   * order), each hit a row of output with a snippet around the match (matched words between « and »).
   * `query` is plain words: every word must occur, and characters that are
   * query syntax elsewhere (quotes, `*`, `:`, parentheses, AND/OR/NOT) are
   * only separators, so no query is an error; a query with no word finds
   * nothing. It runs off the caller's thread, so a slow query never stalls
   * ingest or requests. The index is filled behind ingest, within about a
   * second while output keeps coming, so output appended in the last moments
   * may not be found yet; `flush()` waits for it.
   */
  search(request: SearchRequest): Promise<SearchPage>
  /**
   * Part of one stream of one task's output, in characters (Unicode code
   * points): at most `limit` from `offset`, and the stream's total length.
   * Read off the caller's thread, so paging through a 200 MB log stalls nothing.
   */
  outputPage(runId: string, path: string, stream: OutputStream, offset: number, limit: number): Promise<OutputPage>
  /**
   * Keeps a piece of a run's input too large for its resource (a webhook body
   * above 512 KiB), committed before it returns; `name` replaces an earlier one.
   */
  attach(runId: string, name: string, data: string): void
  /** What attach() kept, or undefined. */
  attachment(runId: string, name: string): string | undefined
  /**
   * Why output of run `runId` appended so far could not all be stored (the
   * store's disk is full, say), once each write to it has been committed or
   * given up; undefined when all of it was stored. The store goes on taking
   * writes meanwhile, and those made once there is room again are kept.
   */
  lostOutput(runId: string): SystemError | undefined
  /**
   * Blocks until every write to run `runId` handed over so far is committed:
   * before the run reaches a point it may wait at for hours (a gate), so a
   * resume after a kill finds its finished tasks and does not run them again.
   */
  commit(runId: string): void
  /**
   * Removes everything kept for the run: its tasks, output (and its place in
   * the search index) and attachments. Written with the next batch, after the
   * writes queued before it; for a Run that is gone, whose output nobody reads.
   */
  forget(runId: string): void
  /** Waits until everything appended so far is committed and indexed. */
  flush(): Promise<void>
  /** Flushes and closes; idempotent. */
  close(): Promise<void>
}

export type StoredChunk = {
  readonly id: number
  readonly path: string
  readonly stream: OutputStream
  readonly text: string
}

export type SearchRequest = {
  readonly query: string
  /** Only output of these runs; absent: every run. */
  readonly runIds?: readonly string[]
  /** Never output of these runs (those of pipelines the user may not see). */
  readonly exceptRunIds?: readonly string[]
  /** Hits to skip, for paging. */
  readonly offset?: number
  /** At most this many hits (default 20). */
  readonly limit?: number
}

export type SearchPage = {
  readonly hits: readonly SearchHit[]
  /** True when hits beyond this page exist. */
  readonly hasMore: boolean
}

export type OutputPage = {
  readonly text: string
  /** The stream's whole length in characters. */
  readonly total: number
}

export type SearchHit = {
  readonly runId: string
  readonly path: string
  readonly stream: OutputStream
  readonly snippet: string
}
