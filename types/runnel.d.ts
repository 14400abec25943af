/**
 * Globals of a runnel pipeline script (docs/pipelines.md).
 *
 * A pipeline script runs in its own V8 isolate, not in Node. These globals are
 * its only way out: there is no Node API, no `require` or `import` of modules,
 * no filesystem, no `process`, and no network but `fetch()`.
 *
 * This file is a script (it has no top-level import or export), so listing it
 * in a tsconfig `include` or `files`, or referencing it with
 * `/// <reference path="path/to/runnel/types/runnel.d.ts" />`, makes the
 * globals known to the editor and to `tsc`. Use it with `"types": []` and
 * `"lib": ["es2024"]`: Node's types and the DOM library declare their own
 * `fetch`, `Headers` and `Response`, which clash with these. runnel itself strips types and
 * does not check them.
 */

/**
 * A volume from `volumes.create()`. Pass it in `mounts` of `runtime.run()` to
 * share files between the tasks of one run. runnel removes it when the run ends.
 * Only the object `volumes.create()` returned is accepted in `mounts`, not a copy.
 */
interface Volume {
  /** The volume's name: the `name` given to `volumes.create()`, else `volume-<n>`. */
  readonly name: string
}

/** The task given to `runtime.run()`. */
interface RunTask {
  /**
   * Names the task: letters, digits, `.`, `_` and `-`, starting with a letter or
   * digit, at most 128 characters. The task is stored at path `tasks/<n>/<name>`,
   * where n counts `runtime.run()` calls of the run from 1, in the order they start.
   */
  name: string
  /**
   * Image reference, for example `busybox` or `node:24`. Required on every driver:
   * the `native` driver ignores it, but the same pipeline then runs on `docker` too.
   */
  image: string
  /**
   * What to run. `path` is the executable (`sh`, `/usr/bin/make`) and `args` its
   * arguments, passed as they are: no shell is involved unless you run one
   * (`{ path: "sh", args: ["-c", "echo hi > out.txt"] }`). On `docker` the
   * image's ENTRYPOINT is not used.
   */
  command: {
    path: string
    args?: readonly string[]
  }
  /**
   * Environment variables of the task. Values must be strings. A value
   * `secret:KEY` is replaced by the secret KEY just before the task starts; the
   * script never sees the value. A missing KEY ends the run with status `error`
   * and a message naming the key.
   */
  env?: Record<string, string>
  /** Maps a path inside the container (`/shared`) to a volume from `volumes.create()`. */
  mounts?: Record<string, Volume>
  /**
   * Working directory of the task, an absolute path (`/src`). On the `native`
   * driver, a workDir that is a mount path, or under one, runs the task inside
   * the volume's directory.
   */
  workDir?: string
  /**
   * Longest time the task may run, as a Go-style duration: `250ms`, `30s`,
   * `1.5s`, `1m30s`, `2h` (units `ms`, `s`, `m`, `h`). When it passes, the task is
   * killed and its result has `timedOut: true`. Without it the task may run until
   * the pipeline's own time limit (`--pipeline-timeout`).
   */
  timeout?: string
  /**
   * What the task's container may use, as Kubernetes writes it. `cpu`: CPUs, a
   * number (`0.5`, `2`) or a quantity (`"500m"`, `"2"`), at least `"1m"`.
   * `memory`: bytes, a whole number or a quantity (`"256Mi"`, `"1Gi"`, `"500M"`).
   * Each is a hard limit (a Pod's requests and limits alike): a task past its
   * memory is killed by the kernel and ends with code 137, its stderr saying
   * `OOMKilled`. The `native` driver does not enforce them and says so on the
   * task's stderr.
   */
  resources?: { cpu?: number | string; memory?: number | string }
  /**
   * Run the container privileged: every capability, root on the Docker host or
   * Kubernetes node. Refused (the run ends with status `error`) unless the server
   * was started with `--allow-privileged-tasks`; the `native` driver never runs one.
   */
  privileged?: boolean
}

/** What `runtime.run()` resolves to once the task has ended. */
interface TaskResult {
  /** Exit code of the task's command. A non-zero code does not throw: check it yourself. */
  readonly code: number
  /**
   * Standard output, with every secret value replaced by `***REDACTED***`. Keeps
   * at most the last 4 MiB of characters; the full output is in the task's
   * stored output.
   */
  readonly stdout: string
  /**
   * Standard error; redacted and cut like `stdout`. On `docker` it starts with the
   * progress of pulling the image when the daemon did not have it.
   */
  readonly stderr: string
  /** When the task started, ISO 8601 (`2025-01-31T12:00:00.000Z`). */
  readonly startedAt: string
  /** When the task ended, ISO 8601. */
  readonly endedAt: string
  /** True when the task's `timeout` passed and runnel killed it (`code` is then 137). */
  readonly timedOut: boolean
}

/** The value of the global `pipelineContext`: facts about the current run. */
interface PipelineContext {
  /** Id of this run. */
  readonly runID: string
  /** Id of the pipeline being run. */
  readonly pipelineID: string
  /** Name of the pipeline being run. */
  readonly pipelineName: string
  /** The driver that runs the tasks: `docker` or `native`. */
  readonly driverName: string
  /** What started the run. */
  readonly triggeredBy: "manual" | "webhook" | "schedule"
  /** Arguments of the run: for `runnel runner`, the words after `--`. Empty when none were given. */
  readonly args: readonly string[]
}

/** The HTTP request that triggered the run, from `http.request()`. */
interface WebhookRequest {
  /** The detected sender, in lower case: `github`, `gitlab`, `stripe`, ..., or `generic`. */
  readonly provider: string
  /** The provider's event type (for example the `X-GitHub-Event` header); empty for `generic`. */
  readonly eventType: string
  /** HTTP method, upper case: `POST`. */
  readonly method: string
  /** Path with query string: `/api/webhooks/<pipeline_id>?ref=main`. */
  readonly url: string
  /**
   * Request headers, names in lower case; a header sent more than once has its
   * values joined with `, `. Lookups ignore case: `headers["X-GitHub-Event"]`
   * and `headers["x-github-event"]` both work (`Object.keys` gives lower case).
   */
  readonly headers: Readonly<Record<string, string>>
  /** The raw request body. Parse it yourself: `JSON.parse(request.body)`. */
  readonly body: string
  /** Query string parameters. */
  readonly query: Readonly<Record<string, string>>
}

/** The answer given to `http.respond()`. */
interface WebhookResponse {
  /** HTTP status code, a whole number from 100 to 599. Default 200. */
  status?: number
  /**
   * Response body, at most 512 KiB once encoded as UTF-8. Default empty. An
   * object or array is sent as JSON, with `content-type: application/json`
   * unless `headers` names a content type.
   */
  body?: string | object
  /**
   * Response headers: valid HTTP header names, string values without line
   * breaks; each name at most once, whatever its case.
   */
  headers?: Record<string, string>
}

/** Runs tasks. */
declare const runtime: {
  /**
   * Runs one task (a container on `docker`, a process on `native`) and resolves
   * once it has ended and its output is stored. Its output is streamed live while
   * it runs.
   *
   * A non-zero exit code resolves: check `code` yourself. Tasks started together
   * (`Promise.all([runtime.run(a), runtime.run(b)])`) run in parallel.
   *
   * Rejects with a message saying what to fix when the task is not valid: a
   * missing or invalid `name`, no `image` or `command.path`, an `env` value that is
   * not a string, a relative `workDir`, an invalid `timeout`, a mount that is not
   * a volume. Uncaught, that fails the run (status `failure`).
   *
   * When runnel cannot start the task (a missing secret, Docker unreachable, an
   * image that cannot be pulled, an executable that does not exist), the run ends
   * with status `error`, even if the script catches the rejection.
   *
   * Tasks still running when the `pipeline` function ends are killed: await every
   * task you start.
   *
   * @example
   * const result = await runtime.run({ name: "test", image: "node:24", command: { path: "npm", args: ["test"] } })
   * if (result.code !== 0) throw new Error(`tests failed with code ${result.code}`)
   */
  run(task: RunTask): Promise<TaskResult>
}

/** Creates volumes that the tasks of a run share. */
declare const volumes: {
  /**
   * Creates a volume shared by the tasks of this run that mount it, and removed
   * when the run ends. Returns the handle at once; `await volumes.create()` also
   * works. On `docker` it is a Docker volume; on `native` a directory.
   *
   * `name` is optional: lowercase letters, digits, `.`, `_` and `-`, starting with
   * a letter or digit, at most 63 characters. Volumes of different runs never
   * meet, even with the same name.
   *
   * @throws TypeError when `name` is not valid.
   * @throws Error when the run already has a volume with that name.
   *
   * @example
   * const work = volumes.create({ name: "work" })
   * await runtime.run({ name: "build", image: "busybox", command: { path: "sh", args: ["-c", "echo ok > status"] },
   *   mounts: { "/work": work }, workDir: "/work" })
   */
  create(options?: { name?: string }): Volume
}

/**
 * Checks inside a pipeline. A failed check throws an error showing both values
 * (`assert.equal failed: expected 1, got 2: <message>`), which fails the run
 * (status `failure`) unless the script catches it.
 */
declare const assert: {
  /** Throws unless `actual === expected` (strict: two objects are equal only if they are the same object). */
  equal(actual: unknown, expected: unknown, message?: string): void
  /** Throws if `actual === expected`. */
  notEqual(actual: unknown, expected: unknown, message?: string): void
  /** Throws unless the string `text` contains `part`. */
  containsString(text: string, part: string, message?: string): void
  /** Throws unless `value` is truthy (not `false`, `0`, `""`, `null`, `undefined` or `NaN`). */
  truthy(value: unknown, message?: string): asserts value
}

/** Facts about the current run: ids, trigger, arguments. */
declare const pipelineContext: PipelineContext

/**
 * The webhook that triggered the run, and the answer to it. A run started by
 * `POST /api/webhooks/<pipeline_id>` (any method) has `pipelineContext.triggeredBy`
 * `"webhook"`; the caller waits for `http.respond()` up to the server's
 * `--webhook-timeout` (5s by default), else gets 202 with `{ run_id }`.
 */
declare const http: {
  /**
   * The incoming webhook request, or undefined when the run was not triggered
   * by a webhook (check `pipelineContext.triggeredBy`). The same frozen object
   * on every call.
   */
  request(): WebhookRequest | undefined
  /**
   * Answers the webhook's caller. Returns at once: the pipeline goes on while
   * the answer is sent, and the run's own result does not change it.
   *
   * Returns true when this call's response is the one sent. Only the first
   * valid call counts: later calls do nothing and return false. In a run not
   * triggered by a webhook every call does nothing and returns false (nothing
   * is checked), so one script serves both kinds of run.
   *
   * Secret values in the body and header values are replaced by `***REDACTED***`.
   *
   * @throws TypeError or RangeError, saying what to fix, when `status`,
   * `headers` or `body` is not valid (see WebhookResponse); nothing is sent
   * then, and a later valid call still answers.
   *
   * @example
   * const event = http.request()?.headers["x-github-event"]
   * http.respond({ status: 202, body: { accepted: event } })
   */
  respond(response?: WebhookResponse): boolean
}

/**
 * Whether the webhook that started the run matches a CEL expression
 * (docs/expressions.md), such as
 * `eventType == "push" && payload.ref == "refs/heads/main"`. The variables:
 * `provider`, `eventType`, `method`, `body` (strings); `headers` (names in lower
 * case) and `query` (maps of string to string); `payload` (the body as JSON,
 * `null` when it is not JSON).
 *
 * True when the run was not triggered by a webhook: a run started by hand does
 * everything. An expression that does not compile, or whose evaluation fails
 * (`payload.missing` when the key is absent; test with `has(payload.key)`), is
 * false, and a line on stderr of `pipeline/console` says why and at which
 * line:column. An expression that does not compile is reported in other runs
 * too, where the result stays true.
 *
 * @throws TypeError when `expression` is not a string.
 *
 * @example
 * if (!webhookTrigger('eventType == "push" && payload.ref == "refs/heads/main"')) return
 */
declare function webhookTrigger(expression: string): boolean

/**
 * The script's console. Output goes to the task `pipeline/console`, streamed
 * live and redacted like task output. Arguments are joined with spaces; strings
 * print as they are, errors as `Name: message`, other values as JSON.
 *
 * Only the methods below exist in the sandbox. When Node's or the DOM's types
 * are also loaded, the editor offers more (`console.table`, ...) that fail there.
 */
interface Console {
  /** Writes a line to stdout of `pipeline/console`. */
  log(...data: unknown[]): void
  /** Same as `console.log`: stdout of `pipeline/console`. */
  info(...data: unknown[]): void
  /** Same as `console.log`: stdout of `pipeline/console`. */
  debug(...data: unknown[]): void
  /** Writes a line to stderr of `pipeline/console`. */
  warn(...data: unknown[]): void
  /** Writes a line to stderr of `pipeline/console`. */
  error(...data: unknown[]): void
}

/** The script's console: `log`, `info`, `debug` to stdout, `warn`, `error` to stderr. */
declare var console: Console

/** What `pipeline.gate()` takes (docs/gates.md). */
interface GateOptions {
  /** The gate's name within the run, shown to approvers: a non-empty string of at most 253 characters. */
  name: string
  /** What the approver is asked, shown in `runnel gate ls` and the REST API. */
  message?: string
  /**
   * How long the gate waits, counted from its creation (a restart of runnel
   * does not reset it): a duration such as `"30s"`, `"1h"`, `"1m30s"`, or a
   * positive number of seconds. Absent: it waits until decided or the run is stopped.
   * The time a gate waits does not count against `--pipeline-timeout`.
   */
  timeout?: string | number
  /**
   * A CEL expression over the user (docs/expressions.md: `Email`, `Name`,
   * `Provider`, `Groups`, ...) that an approver must satisfy, beside the
   * pipeline's own RBAC; for example `'"release" in Groups'`.
   */
  approvers?: string
}

/** An approved gate, as `pipeline.gate()` resolves. */
interface GateApproval {
  /** The gate's id: `runnel gate approve <id>`, `POST /api/gates/<id>/approve`. */
  readonly id: string
  /** Who approved it: `anonymous` on a server without authentication, `kubectl` (or the name given) through kubectl. */
  readonly approvedBy: string
  /** The approver's comment, `""` when none. */
  readonly comment: string
}

/**
 * runnel's pipeline API. A script that exports its own `const pipeline` shadows
 * this global; runnel then gives that exported function the same `gate`, so
 * `pipeline.gate(...)` works whichever way the script exports its pipeline.
 */
declare const pipeline: {
  /**
   * Waits for a person to approve (requires the server's `gates` feature).
   * Creates a Gate (`GET /api/runs/<run>/gates`, `kubectl get gates`) and waits:
   * while it waits the run holds no `--max-in-flight` slot, and it survives a
   * restart of runnel. The run's console says how to approve it.
   *
   * @returns the approval, once someone approves.
   * @throws Error when the gate is rejected (naming who rejected it) or expires,
   * or with `gates feature is not enabled`; catch it to roll back. Uncaught, the run fails.
   * @throws TypeError or RangeError naming the field when `options` is not valid.
   *
   * @example
   * const { approvedBy } = await pipeline.gate({ name: "production", message: "Deploy?", timeout: "1h" })
   */
  gate(options: GateOptions): Promise<GateApproval>
}

/** Header values for fetch(): a Headers object, an object of names to values, or a list of `[name, value]` pairs. */
type HeadersInit = Headers | Record<string, string> | readonly (readonly [string, string])[]

/**
 * HTTP headers, as the WHATWG fetch standard's `Headers`: names ignore case
 * (and are given in lower case), `get` joins repeated values with `, `,
 * iteration is sorted by name.
 */
declare class Headers implements Iterable<[string, string]> {
  /** @throws TypeError for a header name that is not an HTTP token, or a value with a line break. */
  constructor(init?: HeadersInit)
  append(name: string, value: string): void
  set(name: string, value: string): void
  delete(name: string): void
  /** The values of `name` joined with `, `, or null when absent. */
  get(name: string): string | null
  /** Each `set-cookie` value on its own. */
  getSetCookie(): string[]
  has(name: string): boolean
  forEach(callback: (value: string, name: string, headers: Headers) => void, thisArg?: unknown): void
  entries(): IterableIterator<[string, string]>
  keys(): IterableIterator<string>
  values(): IterableIterator<string>
  [Symbol.iterator](): IterableIterator<[string, string]>
}

/** The options of fetch(). */
interface RequestInit {
  /** `GET` by default; standard methods in any case are upper-cased. */
  method?: string
  headers?: HeadersInit
  /**
   * A string (sent as UTF-8, `content-type: text/plain;charset=UTF-8` unless
   * given), an ArrayBuffer or a typed array. Send an object as
   * `JSON.stringify(value)` with a JSON content type. Not allowed on GET and HEAD.
   */
  body?: string | ArrayBuffer | ArrayBufferView
  /**
   * runnel's own option: how long the whole exchange (redirects and body
   * included) may take, as a duration such as `"5s"` or a number of seconds.
   * Default 30 s. Passed, the call rejects with a message naming the timeout.
   */
  timeout?: string | number
}

/** What fetch() resolves to. The body can be read once, by one of the methods. */
interface Response {
  readonly status: number
  /** True for a status from 200 to 299. */
  readonly ok: boolean
  readonly statusText: string
  /** Where the answer came from, after redirects. */
  readonly url: string
  /** True when a redirect was followed. */
  readonly redirected: boolean
  readonly headers: Headers
  readonly bodyUsed: boolean
  /** The body decoded as UTF-8. */
  text(): Promise<string>
  /** The body parsed as JSON. */
  // biome-ignore lint/suspicious/noExplicitAny: typed as the DOM library does, so `const x: T = await response.json()` checks
  json(): Promise<any>
  arrayBuffer(): Promise<ArrayBuffer>
}

/**
 * Sends an HTTP request and resolves with the response, as the WHATWG fetch
 * does (requires the server's `fetch` feature). runnel's operator sends it,
 * not the sandbox: only `http:` and `https:` URLs, redirects followed (at most
 * 20), gzip, deflate and br bodies undone, no cookies or proxy of the host.
 * A response body larger than the server's `--fetch-max-response-mb` (10 MiB
 * by default) rejects. Cloud metadata addresses (169.254.169.254 and the like)
 * are refused, also when a name resolves to one or a redirect leads there,
 * unless the server runs with `--allow-metadata-addresses`. Each call writes one
 * line to the run's console: `fetch GET https://... -> 200 in 45 ms`.
 *
 * Any status resolves (check `ok`); the promise rejects, with a message the
 * script can catch, for a URL that is not valid or not http(s), a refused
 * address, a network failure, the timeout or the size limit, and with exactly
 * `fetch feature is not enabled` when the feature is off (nothing is sent).
 *
 * @example
 * const response = await fetch("https://api.example.com/status", { headers: { accept: "application/json" } })
 * if (!response.ok) throw new Error(`status check answered ${response.status}`)
 * const { healthy } = await response.json()
 */
declare function fetch(url: string, init?: RequestInit): Promise<Response>

/** A Slack notification: chat.postMessage to each channel. */
interface SlackNotifyConfig {
  type: "slack"
  /** A bot token (`xoxb-...`), best as `secret:SLACK_TOKEN`. */
  token: string
  /** Channel names or ids, at least one: `["#builds", "C0123456"]`. */
  channels: string[]
}

/** A Microsoft Teams notification through a workflow webhook: an Adaptive Card with the message. */
interface TeamsNotifyConfig {
  type: "teams"
  /** The workflow's webhook URL, best as `secret:TEAMS_WEBHOOK` (the URL carries its own key). */
  webhook: string
}

/**
 * A notification to any HTTP endpoint: a JSON body
 * `{name, message, run_id, pipeline_name, status}`.
 */
interface HttpNotifyConfig {
  type: "http"
  /** An http(s) URL, or `secret:KEY`. */
  url: string
  /** `POST` by default. */
  method?: string
  /** Each value may be `secret:KEY`; `content-type` is `application/json` unless given. */
  headers?: Record<string, string>
}

type NotifyConfig = SlackNotifyConfig | TeamsNotifyConfig | HttpNotifyConfig

/** Notifications: configure them once, then send by name (docs/pipelines.md). */
declare const notify: {
  /**
   * Replaces the run's notification configs, by name. `secret:KEY` values in
   * `token`, `webhook`, `url` and each `headers` entry are resolved when a
   * notification is sent, not here.
   * @throws TypeError naming the config and the field, for an unknown `type` or a missing or wrong field; no config is then taken.
   */
  setConfigs(configs: Record<string, NotifyConfig>): void
  /**
   * Sends `message` (with secret values replaced by `***REDACTED***`) through
   * the config named `name` (requires the server's `notifications` feature).
   * Tries again on 429 and 5xx answers and network failures, waiting as
   * `Retry-After` says or 0.5 s, 1 s, 2 s; at most 4 attempts of 10 s each.
   * @throws Error naming the configured names for an unknown `name`; naming
   * the key of a missing secret; with the backend, the status and the first
   * line of the answer when it fails; with Slack's error code when Slack
   * answers `ok: false`; exactly `notifications feature is not enabled` when the
   * feature is off (nothing is sent).
   *
   * @example
   * notify.setConfigs({ builds: { type: "slack", token: "secret:SLACK_TOKEN", channels: ["#builds"] } })
   * await notify.send({ name: "builds", message: `deploy of ${pipelineContext.pipelineName} finished` })
   */
  send(notification: { name: string; message: string }): Promise<void>
}

/** A resource version as the Concourse resource protocol gives it: `{ ref: "<sha>" }` for git. */
type ResourceVersion = Record<string, string>

/** A place in a volume: the volume, and a relative directory inside it (its root by default). */
type VolumePlace = Volume | { volume: Volume; path?: string }

/** What a native resource operation takes. */
interface ResourceOptions {
  /**
   * `mock` (Concourse's mock resource), `git` (needs the `fetch` feature; done by runnel itself over
   * http(s)), one of Concourse's own types (`s3`, `time`, `semver`, ... run
   * from `concourse/<type>-resource`), or any type with `image`.
   */
  type: string
  /**
   * The resource's configuration, as Concourse names it (git: `uri`, `branch`,
   * `username`, `password`). `secret:KEY` strings anywhere inside, in nested
   * objects and lists too, are replaced by the secret; a missing one ends the
   * run with status `error`.
   */
  source?: Record<string, unknown>
  /** The operation's parameters, with `secret:KEY` strings resolved as in `source`. */
  params?: Record<string, unknown>
  /** The image of a Concourse resource type runnel does not know by name. */
  image?: string
}

/** A fetched or pushed version and its metadata. */
interface ResourceResult {
  readonly version: ResourceVersion
  readonly metadata: readonly { readonly name: string; readonly value: string }[]
}

/**
 * Concourse resources called from a script. Each call is a task of the run
 * (`tasks/<n>/<type>-<operation>`, numbered with runtime.run's tasks), with
 * its own status and output. A call rejects with a message the script can
 * catch for an unknown type, a git source without `uri`, or a failure of the
 * resource.
 */
declare const nativeResources: {
  /** The versions from `version` on (the newest alone without it), oldest first. */
  check(options: ResourceOptions & { version?: ResourceVersion }): Promise<ResourceVersion[]>
  /**
   * Puts `version` (the newest without it) into `destDir`. git checks out
   * the commit with its `.git` directory, so a later push can use the clone.
   */
  fetch(options: ResourceOptions & { version?: ResourceVersion; destDir: VolumePlace }): Promise<ResourceResult>
  /**
   * Creates a new version. git: `params.repository` is the volume holding a
   * clone (from `fetch`); its HEAD is pushed to `source.branch` and, with
   * `params.tag` (the tag's name), tagged; `only_tag: true` pushes the tag
   * alone. Other types: `inputs` mounts volumes as the put's inputs by name.
   */
  push(
    options: ResourceOptions & {
      params?: Record<string, unknown> & { repository?: VolumePlace; tag?: string; only_tag?: boolean }
      inputs?: Record<string, VolumePlace>
    },
  ): Promise<ResourceResult>
}
