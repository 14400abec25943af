/**
 * Globals of a runnel pipeline script (docs/pipelines.md).
 *
 * A pipeline script runs in its own V8 isolate, not in Node. These globals are
 * its only way out: there is no Node API, no `require` or `import` of modules,
 * no filesystem, no `process` and no network.
 *
 * This file is a script (it has no top-level import or export), so listing it
 * in a tsconfig `include` or `files`, or referencing it with
 * `/// <reference path="path/to/runnel/types/runnel.d.ts" />`, makes the
 * globals known to the editor and to `tsc`. runnel itself strips types and
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
