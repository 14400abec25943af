import type { IncomingHttpHeaders, OutgoingHttpHeaders } from "node:http"

/**
 * What the handler reads of a request: node:http's IncomingMessage, or the
 * in-process transport's (cli/in-process-transport.ts), which hands the
 * same request over without HTTP's framing. The body is read by iterating.
 */
export type ApiRequest = AsyncIterable<Uint8Array> & {
  readonly method?: string | undefined
  readonly url?: string | undefined
  readonly headers: IncomingHttpHeaders
  /** Where it came from; the in-process transport's has no address. */
  readonly socket: { readonly remoteAddress?: string | undefined }
}

/** What the handler does with a response: node:http's ServerResponse, or the in-process transport's. */
export type ApiResponse = {
  readonly headersSent: boolean
  /** True once the response has ended or its client left. */
  readonly closed: boolean
  writeHead(status: number, headers?: OutgoingHttpHeaders): unknown
  flushHeaders(): void
  write(chunk: string | Uint8Array): unknown
  end(chunk?: string | Uint8Array): unknown
  /** Ends a response midway (the client sees an error, not an end). */
  destroy(): unknown
  /** `close`: the response ended, or its client left. */
  on(event: "close", listener: () => void): unknown
}
