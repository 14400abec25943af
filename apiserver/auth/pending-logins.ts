import { generateCodeVerifier, generateState } from "arctic"

/** A browser login between its redirect to the provider and the provider's callback. */
export type PendingLogin = {
  readonly segment: string
  readonly codeVerifier: string
  /** Where the browser goes once logged in: a path on this server. */
  readonly next: string
  readonly expiresAt: number
}

/** A login not finished within this time must start again (the provider's own pages rarely take a minute). */
export const loginTimeoutMs = 10 * 60_000

/**
 * The browser logins under way, by their `state`, in this process's memory
 * (docs/decisions.md): each state is used once, so a replayed callback finds
 * nothing. Bounded: beyond `capacity` the oldest are forgotten, so that
 * requests to /auth/<provider>/login cannot grow memory without end.
 */
export class PendingLogins {
  readonly #byState = new Map<string, PendingLogin>()
  readonly #now: () => number
  readonly #capacity: number

  constructor(now: () => number = Date.now, capacity = 10_000) {
    this.#now = now
    this.#capacity = capacity
  }

  /** A new login's state and PKCE verifier. */
  start(segment: string, next: string): { state: string; codeVerifier: string } {
    const state = generateState()
    const codeVerifier = generateCodeVerifier()
    const now = this.#now()
    for (const [key, login] of this.#byState) if (login.expiresAt <= now) this.#byState.delete(key)
    while (this.#byState.size >= this.#capacity) this.#byState.delete(this.#byState.keys().next().value as string)
    this.#byState.set(state, { segment, codeVerifier, next, expiresAt: now + loginTimeoutMs })
    return { state, codeVerifier }
  }

  /** The login of `state`, once: undefined when unknown, expired or already finished. */
  finish(state: string): PendingLogin | undefined {
    const login = this.#byState.get(state)
    this.#byState.delete(state)
    return login !== undefined && login.expiresAt > this.#now() ? login : undefined
  }
}
