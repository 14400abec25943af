import { errorMessage } from "../../lib/core/errors.ts"
import { type OutboundPolicy, type OutboundResponse, sendOutbound } from "./outbound.ts"

/** The message the `fetch` feature's absence gives (interface.md, Feature gates). */
export const fetchDisabledMessage = "fetch feature is not enabled"

export type FetchSettings = OutboundPolicy & {
  /** The `fetch` feature: off, every call rejects and nothing is sent. */
  readonly enabled: boolean
  /** `--fetch-max-response-mb`, in bytes. */
  readonly maxResponseBytes: number
}

/** A script's fetch() as the prelude checked it; the body travels beside it as bytes. */
export type FetchRequest = {
  readonly url: string
  readonly method: string
  readonly headers: readonly (readonly [string, string])[]
  /** The per-call `timeout` option; 30 s without it. */
  readonly timeoutMs?: number
}

export const defaultFetchTimeoutMs = 30_000
/** WHATWG fetch follows at most 20 redirects; so does runnel. */
const maxRedirects = 20

/**
 * The host side of a script's fetch(): the request goes out under the
 * outbound policy, and one line per call goes to the run's console
 * (`fetch GET https://... -> 200 in 45 ms`), where secrets are redacted.
 */
export function scriptFetch(
  settings: FetchSettings,
  consoleLine: (line: string) => void,
  signal: AbortSignal,
): (request: FetchRequest, body: Uint8Array | undefined) => Promise<OutboundResponse> {
  return async (request, body) => {
    if (!settings.enabled) throw new Error(fetchDisabledMessage)
    const started = performance.now()
    const took = () => `${Math.round(performance.now() - started)} ms`
    try {
      const response = await sendOutbound(
        {
          url: request.url,
          method: request.method,
          headers: request.headers,
          ...(body === undefined ? {} : { body }),
          timeoutMs: request.timeoutMs ?? defaultFetchTimeoutMs,
          maxRedirects,
          maxResponseBytes: settings.maxResponseBytes,
          sizeLimitName: "--fetch-max-response-mb",
          signal,
        },
        settings,
      )
      consoleLine(`fetch ${request.method} ${request.url} -> ${response.status} in ${took()}`)
      return response
    } catch (error) {
      consoleLine(`fetch ${request.method} ${request.url} -> failed in ${took()}: ${errorMessage(error)}`)
      throw new Error(`fetch ${request.method} ${request.url}: ${errorMessage(error)}`)
    }
  }
}
