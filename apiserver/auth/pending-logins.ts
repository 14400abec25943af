import { generateCodeVerifier, generateState } from "arctic"
import { RunnelError } from "../../lib/core/errors.ts"

/** A browser login between its redirect to the provider and the provider's callback. */
export type PendingLogin = {
  readonly segment: string
  readonly codeVerifier: string
  /** Where the browser goes once logged in: a path on this server. */
  readonly next: string
  readonly expiresAt: number
  /** The client address that started it: each address has its own allowance. */
  readonly address: string
}

/** A login not finished within this time must start again (the provider's own pages rarely take a minute). */
export const loginTimeoutMs = 10 * 60_000

/** Logins one address may have under way at once: a person starts one or two (docs/auth.md). */
export const pendingLoginsPerAddress = 10

/**
 * The browser logins under way, by their `state`, in this process's memory
 * (docs/decisions.md): each state is used once, so a replayed callback finds
 * nothing. Bounded twice, so that requests to /auth/<provider>/login cannot
 * grow memory without end nor push out someone else's login: each address
 * may have `pendingLoginsPerAddress` under way (blockedFor says how long it
 * must wait for more), and beyond `capacity` in all a new login is refused
 * with 503, never made room for by forgetting another.
 */
export class PendingLogins {
  readonly #byState = new Map<string, PendingLogin>()
  readonly #now: () => number
  readonly #capacity: number

  constructor(now: () => number = Date.now, capacity = 10_000) {
    this.#now = now
    this.#capacity = capacity
  }

  /** How long `address` must wait before it may start another login, in milliseconds; 0 when it may now. */
  blockedFor(address: string): number {
    const now = this.#prune()
    const own = [...this.#byState.values()].filter((login) => login.address === address)
    if (own.length < pendingLoginsPerAddress) return 0
    return Math.min(...own.map((login) => login.expiresAt)) - now
  }

  /** A new login's state and PKCE verifier; a 503 when `capacity` logins are under way at once. */
  start(segment: string, next: string, address: string): { state: string; codeVerifier: string } {
    const now = this.#prune()
    if (this.#byState.size >= this.#capacity) {
      throw new RunnelError(
        503,
        "too_many_logins",
        "too many logins are under way on this server; try again in a minute",
      )
    }
    const state = generateState()
    const codeVerifier = generateCodeVerifier()
    this.#byState.set(state, { segment, codeVerifier, next, expiresAt: now + loginTimeoutMs, address })
    return { state, codeVerifier }
  }

  /** The login of `state`, once: undefined when unknown, expired or already finished. */
  finish(state: string): PendingLogin | undefined {
    const login = this.#byState.get(state)
    this.#byState.delete(state)
    return login !== undefined && login.expiresAt > this.#now() ? login : undefined
  }

  /** Forgets the expired logins; the time now. */
  #prune(): number {
    const now = this.#now()
    for (const [key, login] of this.#byState) if (login.expiresAt <= now) this.#byState.delete(key)
    return now
  }
}
