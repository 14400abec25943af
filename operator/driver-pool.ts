import { badRequest, errorMessage } from "../lib/core/errors.ts"
import type { Log } from "../lib/core/log.ts"
import type { Driver, DriverConfig } from "./drivers/driver.ts"

/**
 * Makes a driver by name from a pipeline's driverConfig; the composition code in cli/ names the implementations.
 * It may answer a promise: cli/ imports a driver's code only when a run first uses it.
 */
export type DriverSource = (name: string, config: DriverConfig) => Driver | Promise<Driver>

/**
 * The drivers the operator's runs use: one per name and driverConfig,
 * made on first use (or at start, for the default driver) and kept until
 * close(). Each new driver removes what crashed runnel processes left behind
 * (the containers of interrupted runs) before it runs its first task.
 */
export class DriverPool {
  readonly #source: DriverSource
  readonly #allowed: readonly string[] | "*"
  readonly #log: Log
  readonly #drivers = new Map<string, Promise<Driver>>()

  constructor(options: { source: DriverSource; allowed: readonly string[] | "*"; log: Log }) {
    this.#source = options.source
    this.#allowed = options.allowed
    this.#log = options.log
  }

  /** Rejects with a message a person can act on for a driver that is not allowed or not known. */
  get(name: string, config: DriverConfig): Promise<Driver> {
    if (this.#allowed !== "*" && !this.#allowed.includes(name)) {
      return Promise.reject(
        badRequest(`driver "${name}" is not allowed on this server; allowed: ${this.#allowed.join(", ")}`),
      )
    }
    const key = `${name} ${stableJson(config)}`
    let driver = this.#drivers.get(key)
    if (driver === undefined) {
      driver = this.#open(name, config)
      this.#drivers.set(key, driver)
      // A driver that could not be made is not kept: the next run asks again (and gets the same message).
      driver.catch(() => this.#drivers.delete(key))
    }
    return driver
  }

  async #open(name: string, config: DriverConfig): Promise<Driver> {
    const driver = await this.#source(name, config)
    // In the background: a pipeline that runs no task never waits for (or needs) the driver's daemon.
    const cleaned = driver.removeLeftovers().catch((error: unknown) => {
      // The daemon may be down; the first task will say so in its run's message.
      this.#log("driver.leftovers-failed", { driver: name, error: errorMessage(error) })
    })
    return {
      name: driver.name,
      // A resumed run's first task waits until what the crashed process left is gone, the task's old container too.
      open: async (runId) => {
        await cleaned
        return driver.open(runId)
      },
      removeLeftovers: () => driver.removeLeftovers(),
      close: async () => {
        await cleaned
        await driver.close()
      },
    }
  }

  /** Closes every driver made; idempotent. */
  async close(): Promise<void> {
    const drivers = [...this.#drivers.values()]
    this.#drivers.clear()
    await Promise.all(drivers.map(async (driver) => (await driver.catch(() => undefined))?.close()))
  }
}

function stableJson(value: unknown): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null"
  if (Array.isArray(value)) return `[${value.map(stableJson).join(",")}]`
  const entries = Object.entries(value as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : 1))
  return `{${entries.map(([key, item]) => `${JSON.stringify(key)}:${stableJson(item)}`).join(",")}}`
}
