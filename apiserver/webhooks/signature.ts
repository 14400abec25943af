import { createHmac, timingSafeEqual } from "node:crypto"
import { formatDuration } from "../../lib/core/duration.ts"
import { headerValues } from "./request-fields.ts"
import type { IncomingWebhook, Verification, VerifyOptions } from "./webhook-provider.ts"

export const accepted: Verification = Object.freeze({ ok: true })
export const refused = (message: string): Verification => ({ ok: false, message })

/** HMAC-SHA256 of the parts in order; Buffers (the raw body) are hashed as bytes, never re-encoded. */
export function hmacSha256(secret: string, ...parts: (string | Buffer)[]): Buffer {
  const hmac = createHmac("sha256", secret)
  for (const part of parts) hmac.update(part)
  return hmac.digest()
}

const hexDigest = /^[0-9a-fA-F]{64}$/

/** True when `text` has the form of a hex SHA-256 digest: 64 hex digits. */
export function isHexDigest(text: string): boolean {
  return hexDigest.test(text)
}

/**
 * True when `hex` is the hex encoding of `digest`.
 * Compare in constant time: an early-exit comparison reveals how many leading
 * bytes matched, which is enough to forge a signature one byte at a time. Both
 * sides are 32-byte digests, so no length is compared but the public one.
 */
export function digestMatches(hex: string, digest: Buffer): boolean {
  if (!isHexDigest(hex)) return false
  return timingSafeEqual(Buffer.from(hex, "hex"), digest)
}

/**
 * The one value of a signature header, or the refusal when there is none.
 * A repeated header is refused rather than guessed at: which copy is the
 * genuine one is not for us to pick. `display` is the header's usual spelling.
 */
export function oneHeader(request: IncomingWebhook, name: string, display: string): string | Verification {
  const values = headerValues(request, name)
  if (values.length === 0) return refused(`the ${display} header is missing`)
  if (values.length > 1) return refused(`the ${display} header was sent ${values.length} times; send it once`)
  const value = (values[0] ?? "").trim()
  if (value === "") return refused(`the ${display} header is empty`)
  return value
}

export const signingHint = "check that the sender signs with this pipeline's webhook secret"

export function mismatch(what: string): Verification {
  return refused(`${what} does not match the body; ${signingHint}`)
}

/**
 * Refuses a signed timestamp (seconds since the epoch, as Slack and Stripe
 * send it) further than options.maxAgeMs from options.now, either way: an old
 * one is a replay of a captured request, one far in the future a clock that
 * would let it be replayed later. Both providers' own libraries allow 5m.
 */
export function checkTimestamp(seconds: number, options: VerifyOptions, what: string): Verification {
  const ageMs = options.now.getTime() - seconds * 1000
  const limit = formatDuration(options.maxAgeMs)
  // The timestamp has whole seconds, so the age is known to the second: the milliseconds of this server's clock
  // would say nothing about the sender.
  const shown = (ms: number) => formatDuration(ms < 1000 ? ms : ms - (ms % 1000))
  if (ageMs > options.maxAgeMs) {
    return refused(`${what} is ${shown(ageMs)} old; older than ${limit} is refused as a replay`)
  }
  if (-ageMs > options.maxAgeMs) {
    return refused(
      `${what} is ${shown(-ageMs)} in the future; more than ${limit} ahead is refused (check the sender's and this server's clocks)`,
    )
  }
  return accepted
}

/** Whole seconds since the epoch: digits only, so "1e9", "0x10" and " 12" are not timestamps. */
export function parseSeconds(text: string): number | undefined {
  return /^\d{1,12}$/.test(text) ? Number(text) : undefined
}

/**
 * The common scheme: one header carrying `<prefix><hex HMAC-SHA256 of the raw body>`
 * (GitHub and Bitbucket with prefix "sha256=", Linear and Sentry with none).
 */
export function verifyBodyHmac(
  request: IncomingWebhook,
  secret: string,
  header: { name: string; display: string; prefix: string },
): Verification {
  const value = oneHeader(request, header.name, header.display)
  if (typeof value !== "string") return value
  const hex = value.startsWith(header.prefix) ? value.slice(header.prefix.length) : undefined
  if (hex === undefined || !isHexDigest(hex)) {
    return refused(`the ${header.display} header is not ${header.prefix}<64 hex digits> (HMAC-SHA256 of the body)`)
  }
  return digestMatches(hex, hmacSha256(secret, request.rawBody))
    ? accepted
    : mismatch(`the ${header.display} signature`)
}
