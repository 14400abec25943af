import type { NetworkSettings as ConfiguredNetwork } from "../../lib/config/operator.ts"
import type { RunResult } from "../../lib/core/run.ts"
import type { WebhookRequest, WebhookResponse } from "../../lib/core/webhook-request.ts"
import { Redactor } from "../../lib/logs/redactor.ts"
import { compileScript } from "../../lib/script/compile.ts"
import { GateClosed, type GateRequest, gatesDisabledMessage, type RunGates } from "./gates.ts"
import { httpBackend } from "./notify/http-notifier.ts"
import { Notifications } from "./notify/notifications.ts"
import { slackBackend } from "./notify/slack.ts"
import { teamsBackend } from "./notify/teams.ts"
import type { OutboundPolicy } from "./outbound.ts"
import { nativeResources, type ResourceRequest } from "./resources/native-resources.ts"
import type { TaskResult } from "./run-context.ts"
import { runInSandbox, type SandboxLimits, ScriptFailure } from "./sandbox/sandbox.ts"
import { type FetchRequest, scriptFetch } from "./script-fetch.ts"
import { type RunDeps, runToEnd } from "./settle.ts"
import { parseTaskRequest } from "./task-request.ts"
import { webhookTrigger } from "./webhook-trigger.ts"

export type TriggerType = "manual" | "webhook" | "schedule"

/** What a run knows about itself, whichever engine runs it. */
export type RunIdentity = {
  readonly runId: string
  readonly pipelineId: string
  readonly pipelineName: string
  /** The pipeline's text: a script, or YAML. */
  readonly source: string
  readonly triggeredBy: TriggerType
  readonly args: readonly string[]
  /**
   * The request that started the run, when a webhook did: a script's
   * `http.request()`, and what `webhookTrigger()` and YAML's
   * `webhook_trigger` evaluate. Header names may come in any case; the
   * pipeline sees them in lower case.
   */
  readonly webhook?: WebhookRequest
  /** When the run started, if before the engine got it (admitted by the operator, or a resumed run's first attempt). */
  readonly startedAt?: string
}

/** Everything a script run needs to know about itself. */
export type ScriptRun = RunIdentity & {
  /** Shown in compile errors and stack positions. */
  readonly filename: string
  /** Finished tasks of an earlier attempt, when the run is resumed (journalFromStore). */
  readonly journal?: ReadonlyMap<string, TaskResult>
}

/**
 * What a script reaches beyond its tasks: the `fetch` and `notifications`
 * features, and the server's settings for them (lib/config: `--slack-api-url`,
 * `--fetch-max-response-mb`, `--allow-metadata-addresses`).
 */
export type NetworkSettings = ConfiguredNetwork & {
  /** Resolves host names for fetch(), notifications and git; the system's resolver unless given (a test's stand-in for DNS). */
  readonly resolve?: OutboundPolicy["resolve"]
}

/** The defaults of the server's flags, with both features on (`--allowed-features *`). */
export const defaultNetworkSettings: NetworkSettings = {
  fetch: true,
  notifications: true,
  slackApiUrl: "https://slack.com/api",
  fetchMaxResponseBytes: 10 * 1024 * 1024,
  allowMetadataAddresses: false,
}

/** What the engines take from their host: the run's parts, and a script's limits and webhook answer. */
export type EngineDeps = RunDeps & {
  readonly driverName: string
  readonly limits: SandboxLimits
  /**
   * Takes the script's answer to its webhook: called at most once per run, on
   * the script's first valid `http.respond()`, only when `webhook` is given.
   * It must return at once (the script goes on meanwhile) and not throw;
   * whatever it starts must land before the run's final status does. Secret
   * values in the body and header values are redacted.
   */
  readonly respond?: (response: WebhookResponse) => void
  /** The run's approval gates; absent when the `gates` feature is off (the gate call then fails). */
  readonly gates?: RunGates
  /** fetch(), notifications and native git; defaultNetworkSettings when absent. */
  readonly network?: NetworkSettings
  /** The small image with a shell, base64 and tar (`--mock-image`): mock resources, files copied into volumes. */
  readonly mockImage?: string
}

/**
 * Runs a pipeline script to its end and settles it exactly once (runToEnd).
 * Aborting `signal` stops the run (status `aborted`) and kills its tasks.
 * Never rejects: every way a run can end is a RunResult. A task runnel cannot
 * run ends the run as `error` at once, even if the script catches it.
 */
export function runScript(run: ScriptRun, deps: EngineDeps, signal: AbortSignal): Promise<RunResult> {
  return runToEnd(run, deps, signal, {
    redactor: (values) => new Redactor(values),
    taskErrorEndsRun: true,
    ...(run.journal === undefined ? {} : { journal: run.journal }),
    async execute({ context, redactor, signal: runSignal }) {
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
      const network = deps.network ?? defaultNetworkSettings
      const policy: OutboundPolicy = {
        allowMetadataAddresses: network.allowMetadataAddresses,
        ...(network.resolve === undefined ? {} : { resolve: network.resolve }),
      }
      const consoleLine = (line: string) => context.console("stdout", `${line}\n`)
      const fetch = scriptFetch(
        { enabled: network.fetch, maxResponseBytes: network.fetchMaxResponseBytes, ...policy },
        consoleLine,
        runSignal,
      )
      const notifications = new Notifications({
        enabled: network.notifications,
        backends: [slackBackend(network.slackApiUrl), teamsBackend, httpBackend],
        secrets: deps.secrets,
        redactor,
        policy,
        run: { runId: run.runId, pipelineName: run.pipelineName },
        signal: runSignal,
      })
      const resource = nativeResources({
        context,
        mockImage: deps.mockImage ?? "busybox",
        policy,
        fetchEnabled: network.fetch,
        signal: runSignal,
      })
      const host = {
        fetch: (requestJson: string, body: ArrayBuffer | undefined) => {
          const request = JSON.parse(requestJson) as FetchRequest & { bodyText?: string }
          const bytes = request.bodyText === undefined ? body && new Uint8Array(body) : Buffer.from(request.bodyText)
          return fetch(request, bytes)
        },
        decodeUtf8: (body: ArrayBuffer) => new TextDecoder().decode(body),
        notifyConfigs: (configsJson: string) => notifications.setConfigs(JSON.parse(configsJson)),
        notifySend: (requestJson: string) => notifications.send(JSON.parse(requestJson)),
        resource: (requestJson: string) => resource(JSON.parse(requestJson) as ResourceRequest),
        runTask: (taskJson: string) => context.runTask(parseTaskRequest(JSON.parse(taskJson))),
        console: context.console.bind(context),
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
        webhookTrigger: webhookTrigger(webhook, (line) => context.console("stderr", `${line}\n`)),
        gate: async (requestJson: string) => {
          if (deps.gates === undefined) throw new GateClosed("rejected", gatesDisabledMessage)
          const request = JSON.parse(requestJson) as GateRequest
          const approval = await deps.gates.wait(request, (line) => context.console("stdout", `${line}\n`), runSignal)
          const said = approval.comment === "" ? "" : `: ${approval.comment}`
          context.console("stdout", `gate "${request.name}" approved by ${approval.by}${said}\n`)
          return { id: approval.id, approvedBy: approval.by, comment: approval.comment }
        },
      }
      try {
        await runInSandbox(script, { pipelineContext, request: webhook }, host, deps.limits, runSignal)
      } catch (error) {
        // The script threw: a failure, told on its console too. A stopped run ends as stopped.
        if (!(error instanceof ScriptFailure) || runSignal.aborted) throw error
        context.console("stderr", `Error: ${redactor.redact(error.message)}\n`)
        return { status: "failure", message: error.message }
      }
      return { status: "success", message: null }
    },
  })
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
