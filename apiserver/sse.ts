import type { ServerResponse } from "node:http"

/** One event stream to one client (STYLE.md section 10). */
export type SseWriter = {
  /** Writes one `data: <json>` event (with `id:` when given); waits while the client's buffer is full. */
  send(data: unknown, id?: number): Promise<void>
  /** Aborted once the client has gone (or end() was called): the reading behind the stream stops, nothing else. */
  readonly signal: AbortSignal
  /** Ends the response; idempotent. */
  end(): void
}

export const heartbeatMs = 15_000

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
  return {
    signal: gone.signal,
    async send(data, id) {
      if (gone.signal.aborted) return
      const frame = `${id === undefined ? "" : `id: ${id}\n`}data: ${JSON.stringify(data)}\n\n`
      if (res.write(frame)) return
      await new Promise<void>((resolve) => {
        const done = () => {
          res.off("drain", done)
          gone.signal.removeEventListener("abort", done)
          resolve()
        }
        res.on("drain", done)
        gone.signal.addEventListener("abort", done)
      })
    },
    end() {
      stop()
      if (!res.writableEnded) res.end()
    },
  }
}
