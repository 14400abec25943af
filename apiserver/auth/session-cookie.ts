import { keyFromPassphrase, packSealed, Sealer, unpackSealed } from "../../lib/crypto/sealer.ts"

/**
 * The browser's session: a cookie holding the user's JWT, encrypted (not only
 * signed) with a key from --oauth-session-secret, so that the claims a token
 * carries (email, groups) are not readable from the browser's cookie jar or a
 * proxy's log. The AAD binds the value to this cookie.
 */
export const sessionCookieName = "runnel_session"
const aad = sessionCookieName

/** Seals and opens session cookie values with one session secret. */
export function sessionCookies(sessionSecret: string) {
  // SHA-256 of the secret: AES-256 needs 32 bytes; the JWT itself is signed with the secret's bytes as they are.
  const sealer = new Sealer(keyFromPassphrase(sessionSecret), "the session cookie key")
  return {
    seal: (token: string): string => packSealed(sealer.seal(token, aad)).toString("base64url"),
    /** The token, or undefined when the value was not sealed by this server (edited, forged, another secret). */
    open: (value: string): string | undefined => sealer.unseal(unpackSealed(Buffer.from(value, "base64url")), aad),
  }
}
export type SessionCookies = ReturnType<typeof sessionCookies>
