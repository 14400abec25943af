import { readFileSync } from "node:fs"
import ivm from "isolated-vm"
import { errorMessage, SystemError } from "../../../lib/core/errors.ts"
import type { OutputStream } from "../../../lib/core/run.ts"
import type { WebhookRequest } from "../../../lib/core/webhook-request.ts"
import { type CompiledScript, originalPosition } from "../../../lib/script/compile.ts"

const prelude = readFileSync(new URL("./prelude.js", import.meta.url), "utf8")

export type SandboxLimits = {
  /** `--pipeline-memory-mb`: the isolate's heap limit. */
  readonly memoryMb: number
  /** `--pipeline-timeout`: wall-clock limit for the whole script. */
  readonly timeoutMs: number
}

/** What the script sees as `pipelineContext` and `http.request()`. */
export type ScriptGlobals = {
  readonly pipelineContext: Readonly<Record<string, unknown>>
  /** Undefined when the run was not started by a webhook. */
  readonly request: WebhookRequest | undefined
}

/**
 * The only ways out of the isolate. Values cross as JSON text: nothing of the
 * host's realm (prototypes, functions) is ever handed to the script.
 */
export interface ScriptHost {
  /** Resolves with the task result; rejections reach the script as errors it can catch. */
  runTask(taskJson: string): Promise<unknown>
  console(stream: OutputStream, text: string): void
  /**
   * The script's first valid `http.respond()` in a webhook run, checked and
   * normalised by the prelude (a WebhookResponse as JSON). Called
   * synchronously and must not block or throw: true when the response was
   * taken, false when one was taken already.
   */
  respond(responseJson: string): boolean
  /** `webhookTrigger(expression)`: synchronous, never throws; an invalid expression is false and reported by the host. */
  webhookTrigger(expression: string): boolean
  /**
   * `pipeline.gate()`, its request checked by the prelude (a GateRequest as
   * JSON): resolves with the approval, rejects on rejection, expiry or a
   * feature that is off; the script can catch those. The script's time limit
   * does not run while it waits.
   */
  gate(requestJson: string): Promise<unknown>
  /**
   * `fetch()`, its request checked by the prelude (JSON: url, method, headers,
   * and bodyText or the bytes beside it). Resolves with the response and its
   * body; rejects with a message the script can catch.
   */
  fetch(
    requestJson: string,
    body: ArrayBuffer | undefined,
  ): Promise<{
    status: number
    statusText: string
    url: string
    headers: readonly (readonly [string, string])[]
    body: Uint8Array
  }>
  /** Decodes a response body as UTF-8 (a Response's text()), as TextDecoder does. */
  decodeUtf8(body: ArrayBuffer): string
  /** `notify.setConfigs(map)`: synchronous; throws naming the wrong field, and then takes none of them. */
  notifyConfigs(configsJson: string): void
  /** `notify.send({name, message})`. */
  notifySend(requestJson: string): Promise<void>
  /** `nativeResources.check/fetch/push`, volumes by their run names. */
  resource(requestJson: string): Promise<unknown>
}

/** The pipeline's own code threw or rejected: the run is a `failure`, not an `error`. */
export class ScriptFailure extends Error {
  constructor(message: string) {
    super(message)
    this.name = "ScriptFailure"
  }
}

type Outcome = { ok: true } | { ok: false; message: string; stack: string } | { missingExport: true }

/**
 * Runs a compiled pipeline in a fresh isolate (made ahead of need, never used
 * before), disposed at the end whatever happens. Resolves when the pipeline resolves; rejects with ScriptFailure
 * when it throws, with SystemError when a limit is hit or it exports no
 * pipeline, and with the signal's reason when the run is aborted. The host
 * process is never at risk: a runaway loop or a memory bomb only ends this
 * isolate.
 */
export async function runInSandbox(
  script: CompiledScript,
  globals: ScriptGlobals,
  host: ScriptHost,
  limits: SandboxLimits,
  signal: AbortSignal,
): Promise<void> {
  const { isolate, context, prelude: preludeScript } = await takeIsolate(limits.memoryMb)
  let stopped: Error | undefined
  const stop = (reason: Error) => {
    stopped ??= reason
    if (!isolate.isDisposed) isolate.dispose()
  }
  const onAbort = () => stop(signal.reason instanceof Error ? signal.reason : new Error(String(signal.reason)))
  // The time limit counts the script's own time: it stops while the script waits on a gate (for a person).
  let leftMs = limits.timeoutMs
  let armedAt = Date.now()
  let timer: NodeJS.Timeout | undefined
  let waits = 0
  const arm = () => {
    armedAt = Date.now()
    timer = setTimeout(
      () =>
        stop(
          new SystemError(
            `the pipeline ran longer than its time limit (--pipeline-timeout ${formatMs(limits.timeoutMs)}) and was stopped`,
          ),
        ),
      leftMs,
    )
  }
  const clock = {
    pause() {
      if (waits++ > 0) return
      clearTimeout(timer)
      leftMs -= Date.now() - armedAt
    },
    resume() {
      if (--waits === 0 && !isolate.isDisposed) arm()
    },
  }
  arm()
  signal.addEventListener("abort", onAbort, { once: true })
  try {
    if (signal.aborted) throw signal.reason
    await context.global.set("__runnelHost", hostObject(globals, host, clock), { copy: true })
    await preludeScript.run(context)
    const main = await compileCached(
      isolate,
      `__runnelMain(function () {\n${script.code}\n})`,
      { filename: script.filename, lineOffset: -1 },
      codeCacheOf(script),
    )
    const outcome = JSON.parse(await main.run(context, { promise: true, copy: true })) as Outcome
    if ("missingExport" in outcome) {
      throw new SystemError(
        `${script.filename} does not export a pipeline function; add \`export const pipeline = async () => { ... }\` or \`export default async function () { ... }\``,
      )
    }
    if (!outcome.ok) throw new ScriptFailure(withLocation(script, outcome.message, outcome.stack))
  } catch (error) {
    if (stopped !== undefined) throw stopped
    if (isolate.isDisposed || /memory limit/i.test(String((error as Error)?.message))) {
      throw new SystemError(
        `the pipeline used more memory than its limit (--pipeline-memory-mb ${limits.memoryMb}) and was stopped`,
      )
    }
    throw error
  } finally {
    clearTimeout(timer)
    signal.removeEventListener("abort", onAbort)
    dispose(isolate)
  }
}

type Prepared = {
  readonly isolate: ivm.Isolate
  readonly context: ivm.Context
  readonly prelude: ivm.Script
}

/** V8's code cache of one source, made by its first compile, so that later isolates skip parsing it. */
type CodeCache = { data?: ivm.ExternalCopy<ArrayBuffer> }
const preludeCache: CodeCache = {}
/** A compiled pipeline is the same object for every run of its generation (compileScript caches it). */
const scriptCaches = new WeakMap<CompiledScript, CodeCache>()

function codeCacheOf(script: CompiledScript): CodeCache {
  let cache = scriptCaches.get(script)
  if (cache === undefined) {
    cache = {}
    scriptCaches.set(script, cache)
  }
  return cache
}

async function compileCached(
  isolate: ivm.Isolate,
  code: string,
  options: { filename: string; lineOffset?: number },
  cache: CodeCache,
): Promise<ivm.Script> {
  const script = await isolate.compileScript(
    code,
    cache.data === undefined ? { ...options, produceCachedData: true } : { ...options, cachedData: cache.data },
  )
  // With produceCachedData, the Script carries the cache (isolated-vm's typings leave it out of Script).
  const produced = (script as ivm.Script & ivm.CachedDataResult).cachedData
  if (cache.data === undefined && produced !== undefined) cache.data = produced
  return script
}

/**
 * Isolates are made and disposed of by an isolate of their own, the factory,
 * since `new ivm.Isolate()` and `dispose()` are synchronous in the isolate
 * that calls them: about 1.5 ms of V8's work per run, which then runs on
 * isolated-vm's threads rather than on this one, beside the API and the
 * engine. The factory holds isolated-vm's module and runs only the two
 * functions below, never a pipeline's code.
 */
type Factory = {
  readonly isolate: ivm.Isolate
  readonly make: ivm.Reference<(memoryMb: number) => ivm.Isolate>
  readonly dispose: ivm.Reference<(isolate: ivm.Isolate) => void>
}
let factory: Factory | undefined

function isolateFactory(): Factory {
  if (factory === undefined || factory.isolate.isDisposed) {
    const isolate = new ivm.Isolate({ memoryLimit: 16 })
    const context = isolate.createContextSync()
    context.global.setSync("ivm", ivm)
    factory = {
      isolate,
      make: context.evalSync("(memoryLimit) => new ivm.Isolate({ memoryLimit })", { reference: true }),
      dispose: context.evalSync("(isolate) => { if (!isolate.isDisposed) isolate.dispose() }", { reference: true }),
    }
  }
  return factory
}

function dispose(isolate: ivm.Isolate): void {
  if (isolate.isDisposed) return
  isolateFactory()
    .dispose.apply(undefined, [isolate])
    .catch(() => {})
}

/** A fresh isolate with a context and the prelude compiled; nothing is left behind when that fails. */
async function prepare(memoryMb: number): Promise<Prepared> {
  const isolate = await isolateFactory().make.apply(undefined, [memoryMb])
  try {
    const [context, preludeScript] = await Promise.all([
      isolate.createContext(),
      compileCached(isolate, prelude, { filename: "runnel:prelude" }, preludeCache),
    ])
    return { isolate, context, prelude: preludeScript }
  } catch (error) {
    dispose(isolate)
    throw error
  }
}

/**
 * How many isolates wait, made ahead of need, so that a run does not wait
 * the 2-3 ms of making one. Each is taken by exactly one run and disposed of
 * at its end, never shared; the pool fills only after a first script run (a
 * server that runs none holds none) and one idle isolate costs about 1-2 MiB.
 */
const warmIsolates = 1
const warm: { readonly memoryMb: number; readonly prepared: Promise<Prepared> }[] = []

/** A fresh isolate and its context for one run, a warm one when it has the run's memory limit. */
async function takeIsolate(memoryMb: number): Promise<Prepared> {
  const waiting = warm.splice(0)
  while (warm.length < warmIsolates) {
    const prepared = prepare(memoryMb)
    // A warm isolate that failed to be made: the run that takes it makes another.
    prepared.catch(() => {})
    warm.push({ memoryMb, prepared })
  }
  for (const { memoryMb: limit, prepared } of waiting) {
    if (limit !== memoryMb) {
      prepared.then(
        ({ isolate }) => dispose(isolate),
        () => {},
      )
      continue
    }
    const taken = await prepared.catch(() => undefined)
    if (taken !== undefined && !taken.isolate.isDisposed) return taken
  }
  return prepare(memoryMb)
}

function hostObject(globals: ScriptGlobals, host: ScriptHost, clock: { pause(): void; resume(): void }) {
  return {
    context: JSON.stringify(globals.pipelineContext),
    request: globals.request === undefined ? undefined : JSON.stringify(globals.request),
    runTask: new ivm.Reference(settled((taskJson: string) => host.runTask(taskJson))),
    notifySend: new ivm.Reference(settled((requestJson: string) => host.notifySend(requestJson))),
    resource: new ivm.Reference(settled((requestJson: string) => host.resource(requestJson))),
    fetch: new ivm.Reference(async (requestJson: string, body: ArrayBuffer | undefined) => {
      try {
        const { body: answer, ...meta } = await host.fetch(requestJson, body)
        // A copy of exactly the body's bytes: a Buffer may be a view into a larger pool.
        return { ok: true, meta: JSON.stringify(meta), body: new Uint8Array(answer).buffer }
      } catch (error) {
        return { ok: false, message: errorMessage(error) }
      }
    }),
    decodeUtf8: new ivm.Reference((body: ArrayBuffer) => host.decodeUtf8(body)),
    notifyConfigs: new ivm.Reference((configsJson: string) => {
      try {
        host.notifyConfigs(configsJson)
        return JSON.stringify({ ok: true })
      } catch (error) {
        return JSON.stringify({ ok: false, message: errorMessage(error) })
      }
    }),
    gate: new ivm.Reference(async (requestJson: string) => {
      clock.pause()
      try {
        return JSON.stringify({ ok: true, result: await host.gate(requestJson) })
      } catch (error) {
        return JSON.stringify({ ok: false, message: errorMessage(error) })
      } finally {
        clock.resume()
      }
    }),
    log: new ivm.Reference((stream: OutputStream, text: string) => host.console(stream, text)),
    respond: new ivm.Reference((responseJson: string) => host.respond(responseJson)),
    webhookTrigger: new ivm.Reference((expression: string) => host.webhookTrigger(expression)),
  }
}

/**
 * An asynchronous host call as the prelude's callHost expects it: it settles
 * with an envelope and never rejects, since a rejected promise handed to
 * isolated-vm before it attaches its handlers is an unhandled rejection in
 * the host, which would end the whole process.
 */
function settled(call: (json: string) => Promise<unknown>): (json: string) => Promise<string> {
  return async (json) => {
    try {
      return JSON.stringify({ ok: true, result: await call(json) })
    } catch (error) {
      return JSON.stringify({ ok: false, message: errorMessage(error) })
    }
  }
}

/** Appends the first position of the user's file found in the stack, mapped back to their source. */
function withLocation(script: CompiledScript, message: string, stack: string): string {
  const escaped = script.filename.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")
  const frame = new RegExp(`${escaped}:(\\d+):(\\d+)`).exec(stack)
  if (frame === null) return message
  const where = originalPosition(script, Number(frame[1]), Number(frame[2]))
  return where === undefined ? message : `${message} (at ${where})`
}

function formatMs(ms: number): string {
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000}h`
  if (ms % 60_000 === 0) return `${ms / 60_000}m`
  if (ms % 1000 === 0) return `${ms / 1000}s`
  return `${ms}ms`
}
