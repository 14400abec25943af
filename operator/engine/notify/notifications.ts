import { setTimeout as sleep } from "node:timers/promises"
import { errorMessage } from "../../../lib/core/errors.ts"
import type { Redactor } from "../../../lib/logs/redactor.ts"
import type { SecretResolver } from "../../../lib/secrets/secret-resolver.ts"
import { type OutboundPolicy, sendOutbound } from "../outbound.ts"
import type { Deliver, NotifyBackend } from "./notify-backend.ts"
import { show } from "./notify-backend.ts"

/** The message the `notifications` feature's absence gives (interface.md, Feature gates). */
export const notificationsDisabledMessage = "notifications feature is not enabled"

/** How long one attempt may take, how often a notification is tried, and the longest wait between tries. */
export const notifyLimits = { attemptTimeoutMs: 10_000, attempts: 4, firstBackoffMs: 500, maxWaitMs: 30_000 }

export type NotificationsDeps = {
  /** The `notifications` feature: off, send() rejects and nothing is sent. */
  readonly enabled: boolean
  readonly backends: readonly NotifyBackend[]
  readonly secrets: SecretResolver
  readonly redactor: Redactor
  readonly policy: OutboundPolicy
  readonly run: { readonly runId: string; readonly pipelineName: string }
  readonly signal: AbortSignal
}

type Config = Readonly<Record<string, unknown>>

/** The fields of a config whose `secret:` strings are resolved when a notification is sent (interface.md, Secrets). */
const secretFields = ["token", "webhook", "url"] as const

/**
 * A run's notifications: `notify.setConfigs(map)` replaces the configs after
 * checking each one, `notify.send({name, message})` resolves the config's
 * `secret:` values (at send, not before), redacts the message and hands it
 * to the config's backend, whose requests are retried on 429 and 5xx.
 */
export class Notifications {
  readonly #deps: NotificationsDeps
  readonly #backends: ReadonlyMap<string, NotifyBackend>
  #configs = new Map<string, Config>()

  constructor(deps: NotificationsDeps) {
    this.#deps = deps
    this.#backends = new Map(deps.backends.map((backend) => [backend.name, backend]))
  }

  /** Checks every config and takes them all, or throws naming the first wrong field and takes none. */
  setConfigs(map: unknown): void {
    if (map === null || typeof map !== "object" || Array.isArray(map)) {
      throw new TypeError(
        `notify.setConfigs: expected an object of names to configs, such as { builds: { type: "slack", token: "secret:SLACK_TOKEN", channels: ["#builds"] } }; got ${show(map)}`,
      )
    }
    const configs = new Map<string, Config>()
    for (const [name, config] of Object.entries(map)) {
      const where = `notify.setConfigs: "${name}"`
      if (config === null || typeof config !== "object" || Array.isArray(config)) {
        throw new TypeError(`${where} must be a config object with a type; got ${show(config)}`)
      }
      const type = (config as Config).type
      const backend = typeof type === "string" ? this.#backends.get(type) : undefined
      if (backend === undefined) {
        throw new TypeError(
          `${where} has type ${show(type)}, which is not a notification type; known: ${[...this.#backends.keys()].join(", ")}`,
        )
      }
      backend.check(config as Config, `${where} (${backend.name})`)
      configs.set(name, structuredClone(config as Config))
    }
    this.#configs = configs
  }

  async send(request: unknown): Promise<void> {
    if (!this.#deps.enabled) throw new Error(notificationsDisabledMessage)
    if (request === null || typeof request !== "object") {
      throw new TypeError(`notify.send: expected { name, message }; got ${show(request)}`)
    }
    const { name, message } = request as { name?: unknown; message?: unknown }
    if (typeof name !== "string") throw new TypeError(`notify.send: name must be a string; got ${show(name)}`)
    if (typeof message !== "string") throw new TypeError(`notify.send: message must be a string; got ${show(message)}`)
    const config = this.#configs.get(name)
    if (config === undefined) {
      const known = [...this.#configs.keys()]
      throw new Error(
        `notify.send: no notification named "${name}"; ${known.length === 0 ? "none is configured: call notify.setConfigs first" : `configured: ${known.join(", ")}`}`,
      )
    }
    const backend = this.#backends.get(config.type as string) as NotifyBackend
    const resolved = await this.#resolve(config, name)
    const { redactor, run } = this.#deps
    try {
      await backend.send(
        resolved,
        {
          name,
          message: redactor.redact(message),
          runId: run.runId,
          pipelineName: run.pipelineName,
          status: "running",
        },
        this.#deliver(backend.name),
      )
    } catch (error) {
      if (this.#deps.signal.aborted) throw this.#deps.signal.reason
      throw new Error(
        redactor.redact(`notify.send: ${backend.name} notification "${name}" failed: ${errorMessage(error)}`),
      )
    }
  }

  /** The config with its `secret:` values in place; a missing key rejects naming it. */
  async #resolve(config: Config, name: string): Promise<Config> {
    const resolve = async (value: unknown, field: string) => {
      if (typeof value !== "string" || !value.startsWith("secret:")) return value
      const key = value.slice("secret:".length)
      const secret = await this.#deps.secrets.get(key)
      if (secret === undefined) {
        throw new Error(
          `notify.send: secret "${key}" is not set: notification "${name}" asks for it in ${field}; give the pipeline or the server a secret named ${key}`,
        )
      }
      return secret
    }
    const resolved: Record<string, unknown> = { ...config }
    for (const field of secretFields) resolved[field] = await resolve(config[field], field)
    if (config.headers !== undefined) {
      const headers: Record<string, unknown> = {}
      for (const [header, value] of Object.entries(config.headers as Config)) {
        headers[header] = await resolve(value, `headers.${header}`)
      }
      resolved.headers = headers
    }
    return resolved
  }

  /** Sends one request, trying again on 429, 5xx and network failures with a growing wait (or the server's Retry-After). */
  #deliver(backend: string): Deliver {
    return async (request) => {
      let failure = ""
      for (let attempt = 1; ; attempt++) {
        let wait = notifyLimits.firstBackoffMs * 2 ** (attempt - 1)
        try {
          const response = await sendOutbound(
            {
              url: request.url,
              method: request.method,
              headers: request.headers,
              body: Buffer.from(request.body),
              timeoutMs: notifyLimits.attemptTimeoutMs,
              maxRedirects: 0,
              maxResponseBytes: 1024 * 1024,
              sizeLimitName: "notification answers",
              signal: this.#deps.signal,
            },
            this.#deps.policy,
          )
          const body = response.body.toString("utf8")
          if (response.status >= 200 && response.status < 300) return { status: response.status, body }
          failure = `HTTP ${response.status}${firstLine(body)}`
          if (response.status !== 429 && response.status < 500) break
          wait = retryAfterMs(response.headers, wait)
        } catch (error) {
          if (this.#deps.signal.aborted) throw this.#deps.signal.reason
          failure = errorMessage(error)
        }
        if (attempt >= notifyLimits.attempts) {
          failure += ` (after ${attempt} attempts)`
          break
        }
        await sleep(Math.min(wait, notifyLimits.maxWaitMs), undefined, { signal: this.#deps.signal })
      }
      throw new Error(`${backend} answered ${failure}`)
    }
  }
}

function firstLine(body: string): string {
  const line = body.trim().split("\n")[0]?.trim().slice(0, 200) ?? ""
  return line === "" ? "" : `: ${line}`
}

/** Retry-After in seconds or as an HTTP date (RFC 9110, 10.2.3); `fallback` when absent or unreadable. */
function retryAfterMs(headers: readonly (readonly [string, string])[], fallback: number): number {
  const value = headers.find(([name]) => name === "retry-after")?.[1]?.trim()
  if (value === undefined || value === "") return fallback
  if (/^\d+$/.test(value)) return Number(value) * 1000
  const date = Date.parse(value)
  return Number.isNaN(date) ? fallback : Math.max(0, date - Date.now())
}
