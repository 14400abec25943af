import type { ServerResponse } from "node:http"

/** One event stream to one client (STYLE.md section 10). */
export type SseWriter = {
  /** Writes one `data: <json>` event (with `id:` when given); waits while the client's buffer is full. */
  send(data: unknown, id?: number): Promise<void>
  /** Writes one event without waiting; false when the client's buffer is now full (see drained()). */
  write(data: unknown, id?: number): boolean
  /** Resolves true once the client's buffer has room again (or the client has gone), false after `timeoutMs`. */
  drained(timeoutMs: number): Promise<boolean>
  /**
   * Ends the stream of a client that is not keeping up: a comment saying `reason` (behind whatever it has
   * not read yet), then the end. A client that reads none of it within dropGraceMs is disconnected.
   */
  drop(reason: string): void
  /** Aborted once the client has gone (or end() was called): the reading behind the stream stops, nothing else. */
  readonly signal: AbortSignal
  /** Ends the response; idempotent. */
  end(): void
}

export const heartbeatMs = 15_000
/**
 * How long a dropped client has to read what was sent before its connection
 * is cut: a client that never reads would otherwise hold its socket and the
 * buffers behind it for ever.
 */
export const dropGraceMs = 60_000

/**
 * Starts a `text/event-stream` response on `res`. Each event is one line of
 * JSON (JSON.stringify never writes a raw newline), a comment every
 * `heartbeat` ms keeps proxies from closing an idle stream, and a write that
 * fills the socket's buffer waits for 'drain', so a slow client costs
 * memory of one buffer, never of the whole run.
 */
export function openSse(res: ServerResponse, { heartbeat = heartbeatMs }: { heartbeat?: number } = {}): SseWriter {
  const gone = new AbortController()
  res.writeHead(200, {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache, no-transform",
    // nginx and the like would otherwise buffer the stream.
    "X-Accel-Buffering": "no",
  })
  res.flushHeaders()
  const timer = setInterval(() => {
    // A client that is not reading needs no heartbeat, and gets no bytes beyond one buffer.
    if (!res.writableNeedDrain && !gone.signal.aborted) res.write(": heartbeat\n\n")
  }, heartbeat)
  timer.unref()
  const stop = () => {
    clearInterval(timer)
    gone.abort()
  }
  res.once("close", stop)
  res.once("error", stop)
  // Gone already, while the route awaited (a Run being created): 'close' came before this listened.
  if (res.closed) stop()
  const write = (data: unknown, id?: number) => {
    if (gone.signal.aborted) return true
    return res.write(`${id === undefined ? "" : `id: ${id}\n`}data: ${JSON.stringify(data)}\n\n`)
  }
  const drained = (timeoutMs: number) =>
    new Promise<boolean>((resolve) => {
      if (!res.writableNeedDrain || gone.signal.aborted) {
        resolve(true)
        return
      }
      let timer: NodeJS.Timeout | undefined
      const done = (drained: boolean) => {
        clearTimeout(timer)
        res.off("drain", onDrain)
        gone.signal.removeEventListener("abort", onDrain)
        resolve(drained)
      }
      const onDrain = () => done(true)
      // setTimeout would take Infinity as 1 ms.
      if (Number.isFinite(timeoutMs)) timer = setTimeout(() => done(false), timeoutMs)
      res.on("drain", onDrain)
      gone.signal.addEventListener("abort", onDrain)
    })
  return {
    signal: gone.signal,
    write,
    drained,
    async send(data, id) {
      if (!write(data, id)) await drained(Number.POSITIVE_INFINITY)
    },
    drop(reason) {
      if (gone.signal.aborted) return
      // A comment: an EventSource ignores it and reconnects with Last-Event-ID, which is what the reason asks for.
      res.write(`: ${reason.replaceAll("\n", " ")}\n\n`)
      stop()
      const cut = setTimeout(() => res.destroy(), dropGraceMs)
      cut.unref()
      res.once("close", () => clearTimeout(cut))
      res.end()
    },
    end() {
      stop()
      if (!res.writableEnded) res.end()
    },
  }
}
