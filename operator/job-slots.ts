/**
 * Concurrent builds of YAML jobs across the runs of a pipeline, as Concourse
 * limits them: `serial` (one at a time), `max_in_flight` (N at a time) and
 * `serial_groups` (one at a time among all jobs of the group). One operator
 * process runs all runs (ARCHITECTURE.md), so counting in memory is enough.
 * Waiters are served in arrival order; slots are taken in one global key
 * order, so two jobs waiting on overlapping groups never hold one each.
 */
export class JobSlots {
  readonly #slots = new Map<string, { used: number; waiters: (() => void)[] }>()

  /** Resolves with a release function once the job of `pipeline` may start. */
  async acquire(
    pipeline: string,
    job: string,
    limit: { serial: boolean; serialGroups: readonly string[]; maxInFlight?: number },
  ): Promise<() => void> {
    const wanted = new Map<string, number>()
    const perJob = limit.serial ? 1 : limit.maxInFlight
    if (perJob !== undefined) wanted.set(`${pipeline}\u0000job\u0000${job}`, perJob)
    for (const group of limit.serialGroups) wanted.set(`${pipeline}\u0000group\u0000${group}`, 1)
    const keys = [...wanted.keys()].sort()
    for (const key of keys) await this.#take(key, wanted.get(key) ?? 1)
    let released = false
    return () => {
      if (released) return
      released = true
      for (const key of keys) this.#give(key)
    }
  }

  async #take(key: string, limit: number): Promise<void> {
    let slot = this.#slots.get(key)
    if (slot === undefined) {
      slot = { used: 0, waiters: [] }
      this.#slots.set(key, slot)
    }
    if (slot.used < limit && slot.waiters.length === 0) {
      slot.used++
      return
    }
    const { promise, resolve } = Promise.withResolvers<void>()
    slot.waiters.push(() => {
      if (slot !== undefined) slot.used++
      resolve()
    })
    await promise
  }

  #give(key: string): void {
    const slot = this.#slots.get(key)
    if (slot === undefined) return
    slot.used--
    const next = slot.waiters.shift()
    if (next !== undefined) next()
    else if (slot.used === 0) this.#slots.delete(key)
  }
}
