import { createHash, randomBytes, randomInt } from "node:crypto"
import { OAuthError } from "../errors.ts"

/**
 * The device authorization grant (RFC 8628) that `runnel login` uses, backed
 * by the browser login: the CLI gets a device code and a user code, a person
 * logged in through the browser approves the user code, and the CLI's next
 * poll of the device code gets a runnel token. Kept in this process's memory
 * (docs/decisions.md). Codes expire after `deviceCodeLifetimeMs` and give
 * their token once.
 */
export const deviceCodeLifetimeMs = 10 * 60_000
/** RFC 8628 section 3.2's default polling interval; `slow_down` adds 5 seconds to it. */
export const pollIntervalMs = 5_000
/** Device codes one address may have pending at once: `runnel login` asks for one at a time (docs/auth.md). */
export const deviceCodesPerAddress = 5

/** RFC 8628 section 6.1: no vowels (no words), no look-alike digits; 20^8 codes. */
const userCodeAlphabet = "BCDFGHJKLMNPQRSTVWXZ"

type Grant = {
  readonly userCode: string
  /** The client address that asked for it: each address has its own allowance. */
  readonly address: string
  readonly expiresAt: number
  intervalMs: number
  lastPollAt: number | undefined
  state: "pending" | "approved" | "denied" | "used"
  token?: string
}

export type DeviceAuthorization = {
  readonly deviceCode: string
  readonly userCode: string
  readonly expiresInSeconds: number
  readonly intervalSeconds: number
}

export class DeviceGrants {
  // By the SHA-256 of the device code: the map never holds the codes that fetch tokens.
  readonly #byDeviceCode = new Map<string, Grant>()
  readonly #now: () => number
  readonly #capacity: number

  constructor(now: () => number = Date.now, capacity = 10_000) {
    this.#now = now
    this.#capacity = capacity
  }

  /**
   * How long `address` must wait before it may ask for another device code, in milliseconds; 0
   * when it may now. Only its pending, unexpired codes count, so that one address cannot fill the
   * table that every address shares.
   */
  blockedFor(address: string): number {
    const now = this.#now()
    const own = [...this.#byDeviceCode.values()].filter(
      (grant) => grant.address === address && grant.state === "pending" && now < grant.expiresAt,
    )
    if (own.length < deviceCodesPerAddress) return 0
    return Math.min(...own.map((grant) => grant.expiresAt)) - now
  }

  /** A new grant for `address`; a 503 when `capacity` grants are kept at once (never made room for by forgetting another). */
  start(address: string): DeviceAuthorization {
    this.#prune()
    if (this.#byDeviceCode.size >= this.#capacity) {
      throw new OAuthError(
        503,
        "temporarily_unavailable",
        "too many logins are pending on this server; try again in a minute",
      )
    }
    const deviceCode = randomBytes(32).toString("base64url")
    let userCode: string
    do userCode = newUserCode()
    while (this.#pending(userCode) !== undefined)
    this.#byDeviceCode.set(digest(deviceCode), {
      userCode,
      address,
      expiresAt: this.#now() + deviceCodeLifetimeMs,
      intervalMs: pollIntervalMs,
      lastPollAt: undefined,
      state: "pending",
    })
    return {
      deviceCode,
      userCode,
      expiresInSeconds: deviceCodeLifetimeMs / 1000,
      intervalSeconds: pollIntervalMs / 1000,
    }
  }

  /** The user code as written for people (`BCDF-GHJK`) when it names a pending, unexpired grant. */
  pendingUserCode(given: string): string | undefined {
    return this.#pending(normalUserCode(given))?.userCode
  }

  /** Approves (with the token the device will get) or denies a pending grant; false when there is none. */
  decide(userCode: string, decision: { approved: true; token: string } | { approved: false }): boolean {
    const grant = this.#pending(normalUserCode(userCode))
    if (grant === undefined) return false
    if (decision.approved) {
      grant.state = "approved"
      grant.token = decision.token
    } else {
      grant.state = "denied"
    }
    return true
  }

  /** The device's poll: its token once approved, else the RFC 8628 section 3.5 error. */
  poll(deviceCode: string): { token: string; expiresInSeconds?: number } {
    const grant = this.#byDeviceCode.get(digest(deviceCode))
    const now = this.#now()
    if (grant === undefined) {
      throw new OAuthError(400, "invalid_grant", "the device code is unknown to this server; run runnel login again")
    }
    if (grant.state === "used") {
      throw new OAuthError(
        400,
        "invalid_grant",
        "the device code has already been exchanged for a token; it works once",
      )
    }
    if (now >= grant.expiresAt) {
      throw new OAuthError(
        400,
        "expired_token",
        "the device code has expired before it was approved; run runnel login again",
      )
    }
    if (grant.state === "denied") throw new OAuthError(400, "access_denied", "the login was denied in the browser")
    const tooSoon = grant.lastPollAt !== undefined && now - grant.lastPollAt < grant.intervalMs
    grant.lastPollAt = now
    if (tooSoon) {
      grant.intervalMs += 5_000
      throw new OAuthError(
        400,
        "slow_down",
        `polled sooner than the interval; poll every ${grant.intervalMs / 1000} seconds from now on`,
      )
    }
    if (grant.state === "pending") {
      throw new OAuthError(400, "authorization_pending", "the login has not been approved in the browser yet")
    }
    const token = grant.token as string
    grant.state = "used"
    delete grant.token
    return { token }
  }

  #pending(userCode: string): Grant | undefined {
    const now = this.#now()
    for (const grant of this.#byDeviceCode.values()) {
      if (grant.userCode === userCode && grant.state === "pending" && now < grant.expiresAt) return grant
    }
    return undefined
  }

  /** Grants gone past their expiry are kept as long again, so a late poll hears `expired_token`, then forgotten. */
  #prune(): void {
    const now = this.#now()
    for (const [key, grant] of this.#byDeviceCode) {
      if (now >= grant.expiresAt + deviceCodeLifetimeMs) this.#byDeviceCode.delete(key)
    }
  }
}

const digest = (deviceCode: string) => createHash("sha256").update(deviceCode).digest("base64url")

function newUserCode(): string {
  let code = ""
  for (let i = 0; i < 8; i++) code += userCodeAlphabet[randomInt(userCodeAlphabet.length)]
  return `${code.slice(0, 4)}-${code.slice(4)}`
}

/** What a person typed, as stored: upper case, letters only, the dash back in the middle (RFC 8628 section 6.1). */
function normalUserCode(given: string): string {
  const letters = given.toUpperCase().replace(/[^A-Z]/g, "")
  return letters.length === 8 ? `${letters.slice(0, 4)}-${letters.slice(4)}` : ""
}
