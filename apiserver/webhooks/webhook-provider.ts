/**
 * An incoming webhook as the provider layer sees it: the parts of a
 * node:http request that detection and verification read. `headers` has
 * IncomingMessage.headers' form (lower-case names, an array when a header
 * came more than once); `rawBody` is the body exactly as received, since
 * every signature is computed over those bytes and not over a re-encoding.
 * (The same request as the pipeline later sees it, from its Run, is
 * WebhookRequest in lib/core.)
 */
export type IncomingWebhook = {
  method: string
  headers: Readonly<Record<string, string | string[] | undefined>>
  rawBody: Buffer
  /** Koa's ctx.query form is accepted too: an array when a parameter is repeated. */
  query: Readonly<Record<string, string | string[] | undefined>>
  /** The path with its query, as the pipeline's `http.request().url` sees it. */
  url?: string
}

/** What a verification decided. A refusal is an HTTP 401 with `message`, which names what is missing or wrong. */
export type Verification = { ok: true } | { ok: false; message: string }

/** The clock of a verification: timestamps further than `maxAgeMs` from `now`, either way, are replays. */
export type VerifyOptions = { now: Date; maxAgeMs: number }

/**
 * One source of incoming webhooks (contract.md section 1 names them).
 * - matches() looks only at headers; providers are tried in the order of
 *   `webhookProviders` and the first match wins, so the order is behaviour.
 * - eventType() never throws: a body that is not JSON, or lacks the field,
 *   gives "".
 * - verify() is called only with a configured, non-empty secret (the rule for
 *   requests without one lives once, in verifyWebhook). It never throws; every
 *   comparison is constant-time over the raw body bytes, and a refusal's
 *   message never contains the secret or the expected signature.
 */
export interface WebhookProvider {
  readonly name: string
  /** True when a request is refused unless a secret is configured, whatever it carries. */
  readonly secretRequired: boolean
  matches(request: Pick<IncomingWebhook, "headers">): boolean
  eventType(request: IncomingWebhook): string
  verify(request: IncomingWebhook, secret: string, options: VerifyOptions): Verification
}
