import { decodeJwt, decodeProtectedHeader, errors, jwtVerify, SignJWT } from "jose"
import { RunnelError } from "../../lib/core/errors.ts"
import { providerUser, type RequestUser } from "./user.ts"

/**
 * runnel's access tokens (interface.md "JWT claims", contract.md section 3):
 * HS256 with the UTF-8 bytes of --oauth-session-secret as the key, no
 * derivation; `iss` is `runnel`; they expire 30 days after issue. Groups and
 * organizations travel in the token too, so that RBAC on `Groups` and
 * `Organizations` holds for API clients as it does for the browser.
 */
export const tokenIssuer = "runnel"
export const tokenLifetimeSeconds = 30 * 24 * 60 * 60

export async function issueToken(sessionSecret: string, user: RequestUser, now = Date.now()): Promise<string> {
  const issuedAt = Math.floor(now / 1000)
  return new SignJWT({
    email: user.Email,
    name: user.Name,
    nick_name: user.NickName,
    provider: user.Provider,
    orgs: [...user.Organizations],
    groups: [...user.Groups],
  })
    .setProtectedHeader({ alg: "HS256", typ: "JWT" })
    .setSubject(user.UserID)
    .setIssuer(tokenIssuer)
    .setIssuedAt(issuedAt)
    .setExpirationTime(issuedAt + tokenLifetimeSeconds)
    .sign(new TextEncoder().encode(sessionSecret))
}

/**
 * The user a token names, or a 401 saying what was wrong with it: missing
 * parts, not JSON, another algorithm (`none` included), a bad signature, the
 * wrong issuer, expired. Never which key was expected.
 */
export async function verifyToken(sessionSecret: string, token: string): Promise<RequestUser> {
  // Its shape first: jose checks the signature before it reads the claims, so claims that are
  // not JSON would otherwise be called a bad signature, which sends the user looking for the wrong thing.
  try {
    decodeProtectedHeader(token)
    decodeJwt(token)
  } catch {
    throw unauthorized(`the bearer token ${malformed}`)
  }
  let claims: Record<string, unknown>
  try {
    ;({ payload: claims } = await jwtVerify(token, new TextEncoder().encode(sessionSecret), {
      algorithms: ["HS256"],
      issuer: tokenIssuer,
      requiredClaims: ["sub", "exp", "iat"],
    }))
  } catch (error) {
    throw unauthorized(`the bearer token ${whyRefused(error)}`)
  }
  const text = (name: string) => (typeof claims[name] === "string" ? (claims[name] as string) : "")
  const list = (name: string) =>
    Array.isArray(claims[name]) ? (claims[name] as unknown[]).filter((item) => typeof item === "string") : []
  return providerUser({
    UserID: text("sub"),
    Email: text("email"),
    Name: text("name"),
    NickName: text("nick_name"),
    Provider: text("provider"),
    Organizations: list("orgs"),
    Groups: list("groups"),
  })
}

/** A 401 the error renderer answers with `WWW-Authenticate`. */
export const unauthorized = (message: string) => new RunnelError(401, "unauthorized", message)

const malformed =
  "is not a well-formed JWT (three base64url parts: header, claims, signature, with JSON in the first two)"

function whyRefused(error: unknown): string {
  if (error instanceof errors.JWTExpired) return "has expired; log in again (runnel login)"
  if (error instanceof errors.JOSEAlgNotAllowed) return "is not signed with HS256, the only algorithm runnel accepts"
  if (error instanceof errors.JWSSignatureVerificationFailed)
    return "has a bad signature: it was not issued by this server"
  if (error instanceof errors.JWTClaimValidationFailed) {
    return error.claim === "iss"
      ? `was not issued by runnel (iss must be "${tokenIssuer}")`
      : `has an invalid "${error.claim}" claim`
  }
  if (error instanceof errors.JWSInvalid || error instanceof errors.JWTInvalid) return malformed
  return "could not be verified"
}
