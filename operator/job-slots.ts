type Slot = { used: number; waiters: { grant: () => void }[] }

/**
 * Concurrent runs and job builds of YAML pipelines, as Concourse limits them:
 * a job's `serial` (one at a time), `max_in_flight` (N at a time) and
 * `serial_groups` (one at a time among all jobs of the group), and the
 * pipeline's top-level `max_in_flight` (runs at a time). One operator process
 * runs all runs (ARCHITECTURE.md), so counting in memory is enough. Waiters
 * are served in arrival order; slots are taken in one global key order, so
 * two jobs waiting on overlapping groups never hold one each. A wait whose
 * signal aborts gives back what it took and rejects with the signal's reason.
 */
export class JobSlots {
  readonly #slots = new Map<string, Slot>()
  #waiting = 0

  /** Acquisitions waiting for a slot now (a metric's gauge). */
  get waiting(): number {
    return this.#waiting
  }

  /** Resolves with a release function once the job of `pipeline` may start. */
  acquire(
    pipeline: string,
    job: string,
    limit: { serial: boolean; serialGroups: readonly string[]; maxInFlight?: number },
    signal?: AbortSignal,
  ): Promise<() => void> {
    const wanted = new Map<string, number>()
    const perJob = limit.serial ? 1 : limit.maxInFlight
    if (perJob !== undefined) wanted.set(`${pipeline}\u0000job\u0000${job}`, perJob)
    for (const group of limit.serialGroups) wanted.set(`${pipeline}\u0000group\u0000${group}`, 1)
    return this.#take(wanted, signal)
  }

  /** Resolves with a release function once a run of `pipeline` may start under its `max_in_flight`. */
  acquireRun(pipeline: string, maxInFlight: number, signal?: AbortSignal): Promise<() => void> {
    return this.#take(new Map([[`${pipeline}\u0000run`, maxInFlight]]), signal)
  }

  async #take(wanted: ReadonlyMap<string, number>, signal: AbortSignal | undefined): Promise<() => void> {
    const taken: string[] = []
    const release = () => {
      for (const key of taken.splice(0)) this.#give(key)
    }
    try {
      for (const key of [...wanted.keys()].sort()) {
        await this.#takeOne(key, wanted.get(key) ?? 1, signal)
        taken.push(key)
      }
    } catch (error) {
      release()
      throw error
    }
    return release
  }

  #takeOne(key: string, limit: number, signal: AbortSignal | undefined): Promise<void> {
    signal?.throwIfAborted()
    let slot = this.#slots.get(key)
    if (slot === undefined) {
      slot = { used: 0, waiters: [] }
      this.#slots.set(key, slot)
    }
    if (slot.used < limit && slot.waiters.length === 0) {
      slot.used++
      return Promise.resolve()
    }
    const waiting = slot
    this.#waiting++
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        this.#waiting--
        waiting.waiters.splice(waiting.waiters.indexOf(waiter), 1)
        reject(signal?.reason)
      }
      const waiter = {
        grant: () => {
          this.#waiting--
          signal?.removeEventListener("abort", onAbort)
          waiting.used++
          resolve()
        },
      }
      waiting.waiters.push(waiter)
      signal?.addEventListener("abort", onAbort, { once: true })
    })
  }

  #give(key: string): void {
    const slot = this.#slots.get(key)
    if (slot === undefined) return
    slot.used--
    const next = slot.waiters.shift()
    if (next !== undefined) next.grant()
    else if (slot.used === 0) this.#slots.delete(key)
  }
}
