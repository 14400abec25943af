/** At most `failures` failed authentications per address within `windowMs`; more are answered 429. */
export type FailureLimit = { readonly failures: number; readonly windowMs: number }

/** 10 failures a minute per address: a person who mistypes is not stopped, a password guesser is (docs/auth.md). */
export const defaultFailureLimit: FailureLimit = { failures: 10, windowMs: 60_000 }

/** Addresses remembered at most: beyond it the one that failed longest ago is forgotten, so memory stays bounded. */
const addressLimit = 10_000

/**
 * Failed authentications per client address, in a sliding window: each
 * address keeps the times of its last `failures` failures, and is blocked
 * until the oldest of them leaves the window. Success does not reset the
 * count: a guesser who also holds a valid credential gains nothing from it.
 */
export class FailureCounter {
  readonly #limit: FailureLimit
  /** Oldest first; Map order is insertion order, refreshed on each failure. */
  readonly #times = new Map<string, number[]>()

  constructor(limit: FailureLimit = defaultFailureLimit) {
    this.#limit = limit
  }

  add(address: string, nowMs: number): void {
    const times = this.#recent(address, nowMs)
    times.push(nowMs)
    if (times.length > this.#limit.failures) times.shift()
    this.#times.delete(address)
    this.#times.set(address, times)
    if (this.#times.size > addressLimit) this.#times.delete(this.#times.keys().next().value as string)
  }

  /** How long `address` must still wait, in milliseconds; 0 when it may try. */
  blockedFor(address: string, nowMs: number): number {
    const times = this.#recent(address, nowMs)
    if (times.length < this.#limit.failures) return 0
    return (times[0] ?? nowMs) + this.#limit.windowMs - nowMs
  }

  #recent(address: string, nowMs: number): number[] {
    const times = (this.#times.get(address) ?? []).filter((time) => nowMs - time < this.#limit.windowMs)
    if (times.length === 0) this.#times.delete(address)
    return times
  }
}
