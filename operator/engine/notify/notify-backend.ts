/** One notification as a pipeline sends it, its message already redacted. */
export type Notification = {
  readonly name: string
  readonly message: string
  readonly runId: string
  readonly pipelineName: string
  /** The run's status when it was sent: `running` while the script runs. */
  readonly status: string
}

/** One HTTP request a backend makes; `deliver` sends it with the timeout and retries of notifications. */
export type NotifyRequest = {
  readonly url: string
  readonly method: string
  readonly headers: readonly (readonly [string, string])[]
  readonly body: string
}

/** What `deliver` answers once a request succeeded (2xx): the body, for backends that say more in it. */
export type Deliver = (request: NotifyRequest) => Promise<{ readonly status: number; readonly body: string }>

/**
 * A notification backend (`type` of a config): slack, teams, http.
 * - check() runs at `notify.setConfigs`: it throws naming the field that is
 *   missing or wrong, so the script learns of a bad config before any send.
 * - send() runs with `secret:` values already resolved; it makes its requests
 *   through `deliver`, and rejects with a message naming what the service said.
 */
export type NotifyBackend = {
  readonly name: string
  check(config: Readonly<Record<string, unknown>>, where: string): void
  send(config: Readonly<Record<string, unknown>>, notification: Notification, deliver: Deliver): Promise<void>
}

/** A required non-empty string field of a config. */
export function requiredString(
  config: Readonly<Record<string, unknown>>,
  field: string,
  where: string,
  example: string,
): string {
  const value = config[field]
  if (typeof value !== "string" || value === "") {
    throw new TypeError(
      `${where} needs ${field}, a non-empty string such as ${JSON.stringify(example)}; got ${show(value)}`,
    )
  }
  return value
}

/** A URL field: a `secret:` reference (checked when sent), or an http(s) URL. */
export function urlField(
  config: Readonly<Record<string, unknown>>,
  field: string,
  where: string,
  example: string,
): string {
  const value = requiredString(config, field, where, example)
  if (value.startsWith("secret:")) return value
  if (!URL.canParse(value) || !/^https?:$/.test(new URL(value).protocol)) {
    throw new TypeError(
      `${where}: ${field} must be an http or https URL, or "secret:KEY"; got ${JSON.stringify(value)}`,
    )
  }
  return value
}

export function show(value: unknown): string {
  if (value === undefined) return "nothing"
  const text = JSON.stringify(value) ?? String(value)
  return `${text.length > 60 ? `${text.slice(0, 60)}…` : text} (${Array.isArray(value) ? "a list" : value === null ? "null" : typeof value})`
}
