import { errorMessage, SystemError } from "../../lib/core/errors.ts"
import type { RunResult } from "../../lib/core/run.ts"
import { type FinalRunStatus, runExitCode } from "../../lib/core/status.ts"
import type { WebhookRequest, WebhookResponse } from "../../lib/core/webhook-request.ts"
import type { LogStore } from "../../lib/logs/log-store.ts"
import { Redactor } from "../../lib/logs/redactor.ts"
import { compileScript } from "../../lib/script/compile.ts"
import type { SecretResolver } from "../../lib/secrets/secret-resolver.ts"
import type { Driver } from "../drivers/driver.ts"
import { RunContext, type TaskResult } from "./run-context.ts"
import type { RunObserver } from "./run-observer.ts"
import { runInSandbox, type SandboxLimits, ScriptFailure } from "./sandbox/sandbox.ts"
import { parseTaskRequest } from "./task-request.ts"
import { webhookTrigger } from "./webhook-trigger.ts"

export type TriggerType = "manual" | "webhook" | "schedule"

/** Everything a script run needs to know about itself. */
export type ScriptRun = {
  readonly runId: string
  readonly pipelineId: string
  readonly pipelineName: string
  /** Shown in compile errors and stack positions. */
  readonly filename: string
  readonly source: string
  readonly triggeredBy: TriggerType
  readonly args: readonly string[]
  /**
   * The request that started the run, when a webhook did: the script's
   * `http.request()`, and what `webhookTrigger()` evaluates. Header names may
   * come in any case; the script sees them in lower case.
   */
  readonly webhook?: WebhookRequest
  /** Finished tasks of an earlier attempt, when the run is resumed (journalFromStore). */
  readonly journal?: ReadonlyMap<string, TaskResult>
}

export type EngineDeps = {
  readonly driver: Driver
  readonly driverName: string
  readonly store: LogStore
  readonly secrets: SecretResolver
  readonly observer: RunObserver
  readonly limits: SandboxLimits
  /**
   * Takes the script's answer to its webhook: called at most once per run, on
   * the script's first valid `http.respond()`, only when `webhook` is given.
   * It must return at once (the script goes on meanwhile) and not throw;
   * whatever it starts must land before the run's final status does. Secret
   * values in the body and header values are redacted.
   */
  readonly respond?: (response: WebhookResponse) => void
}

/** Why a run was stopped from outside; distinct from a SystemError, which ends a run as `error`. */
export class RunAborted extends Error {
  constructor(message = "the run was stopped") {
    super(message)
    this.name = "RunAborted"
  }
}

/**
 * Runs a pipeline script to its end and settles it exactly once. Aborting
 * `signal` stops the run (status `aborted`) and kills its tasks. Never
 * rejects: every way a run can end is a RunResult.
 */
export async function runScript(run: ScriptRun, deps: EngineDeps, signal: AbortSignal): Promise<RunResult> {
  const startedAt = new Date().toISOString()
  const controller = new AbortController()
  const forwardAbort = () => controller.abort(new RunAborted())
  signal.addEventListener("abort", forwardAbort, { once: true })
  if (signal.aborted) forwardAbort()

  let redactor = new Redactor([])
  let context: RunContext | undefined
  let outcome: PromiseSettledResult<void>
  try {
    redactor = new Redactor(await deps.secrets.values())
    const runContext = new RunContext({
      runId: run.runId,
      driver: deps.driver,
      store: deps.store,
      redactor,
      secrets: deps.secrets,
      observer: deps.observer,
      signal: controller.signal,
      fail: (error) => controller.abort(error),
      ...(run.journal === undefined ? {} : { journal: run.journal }),
    })
    context = runContext
    const script = await compileScript(run.source, run.filename)
    const webhook = run.webhook === undefined ? undefined : lowerCaseHeaders(run.webhook)
    const pipelineContext = {
      runID: run.runId,
      pipelineID: run.pipelineId,
      pipelineName: run.pipelineName,
      driverName: deps.driverName,
      triggeredBy: run.triggeredBy,
      args: run.args,
    }
    let responded = false
    const host = {
      runTask: (taskJson: string) => runContext.runTask(parseTaskRequest(JSON.parse(taskJson))),
      console: runContext.console.bind(runContext),
      respond: (responseJson: string) => {
        if (webhook === undefined || responded) return false
        responded = true
        const response = JSON.parse(responseJson) as WebhookResponse
        deps.respond?.({
          status: response.status,
          headers: Object.fromEntries(
            Object.entries(response.headers).map(([name, value]) => [name, redactor.redact(value)]),
          ),
          body: redactor.redact(response.body),
        })
        return true
      },
      webhookTrigger: webhookTrigger(webhook, (line) => runContext.console("stderr", `${line}\n`)),
    }
    await runInSandbox(script, { pipelineContext, request: webhook }, host, deps.limits, controller.signal)
    outcome = { status: "fulfilled", value: undefined }
  } catch (reason) {
    outcome = { status: "rejected", reason }
  }

  const { status, message } = settle(outcome, controller.signal)
  const redactedMessage = message === null ? null : redactor.redact(message)
  if (status === "failure" && redactedMessage !== null) context?.console("stderr", `Error: ${redactedMessage}\n`)
  // Tasks the script started but did not wait for end with the run.
  controller.abort(new RunAborted("the pipeline finished before this task"))
  signal.removeEventListener("abort", forwardAbort)
  const tasks = (await context?.close(status)) ?? []
  const result: RunResult = {
    runId: run.runId,
    status,
    code: runExitCode(status),
    message: redactedMessage,
    startedAt,
    finishedAt: new Date().toISOString(),
    tasks,
  }
  deps.observer.runFinished(result)
  return result
}

/** The one place that decides how a run ended. The first reason to stop wins. */
function settle(
  outcome: PromiseSettledResult<void>,
  signal: AbortSignal,
): { status: FinalRunStatus; message: string | null } {
  if (signal.aborted) {
    const reason: unknown = signal.reason
    if (reason instanceof SystemError) return { status: "error", message: reason.message }
    return { status: "aborted", message: errorMessage(reason) }
  }
  if (outcome.status === "fulfilled") return { status: "success", message: null }
  const reason: unknown = outcome.reason
  if (reason instanceof ScriptFailure) return { status: "failure", message: reason.message }
  if (reason instanceof SystemError) return { status: "error", message: reason.message }
  return { status: "error", message: `runnel failed to run the pipeline: ${errorMessage(reason)}` }
}

/** The request with header names in lower case; two spellings of one name are joined as a repeated header is. */
export function lowerCaseHeaders(request: WebhookRequest): WebhookRequest {
  const headers = new Map<string, string>()
  for (const [name, value] of Object.entries(request.headers)) {
    const key = name.toLowerCase()
    const earlier = headers.get(key)
    headers.set(key, earlier === undefined ? value : `${earlier}, ${value}`)
  }
  return { ...request, headers: Object.fromEntries(headers) }
}
