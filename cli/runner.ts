import { createHash, randomBytes } from "node:crypto"
import { mkdtemp, readFile, rm } from "node:fs/promises"
import { tmpdir } from "node:os"
import { basename, extname, join, resolve } from "node:path"
import type { RunnerSettings } from "../lib/config/runner.ts"
import { badRequest, errorMessage } from "../lib/core/errors.ts"
import { openSqliteLogStore } from "../lib/logs/sqlite-log-store.ts"
import { type ContentType, inferContentType } from "../lib/script/content-type.ts"
import { staticSecrets } from "../lib/secrets/secret-resolver.ts"
import { refusePrivileged } from "../operator/drivers/refuse-privileged.ts"
import { drivers } from "./drivers.ts"
import { TerminalObserver } from "./terminal-observer.ts"

/** `runnel runner FILE`: runs the pipeline on this machine with the settings' driver; answers the run's exit code. */
export async function runner(file: string, args: string[], settings: RunnerSettings): Promise<number> {
  const { driver: driverName, secrets, limits } = settings
  const factory = await drivers.get(driverName).load(settings.host)
  const source = await readPipeline(file)
  const created = factory.create({})
  const driver = settings.allowPrivilegedTasks
    ? created
    : refusePrivileged(created, "run runnel runner with --allow-privileged-tasks to allow it")
  const leftovers = driver.removeLeftovers().catch(() => {}) // the daemon may be down; a task will say so
  // Not :memory: by default: a task printing gigabytes must not hold them in memory.
  const scratch = settings.storagePath === undefined ? await mkdtemp(join(tmpdir(), "runnel-runner-")) : undefined
  const opening = openSqliteLogStore(scratch === undefined ? String(settings.storagePath) : join(scratch, "runnel.db"))
  opening.catch(() => {}) // awaited below: a failure that comes first is not an unhandled rejection
  const contentType = contentTypeOfFile(file, source)
  // Loaded while the log store's writer thread starts.
  const { engineFor } = await import("../operator/engine/pipeline-engine.ts")
  const { RunAborted } = await import("../operator/engine/settle.ts")
  const { memoryVersions } = await import("../operator/engine/yaml/interpret.ts")
  const store = await opening
  const stop = new AbortController()
  const onSignal = () => {
    if (stop.signal.aborted) process.exit(130)
    process.stderr.write("stopping the run: its tasks are being killed (press Ctrl-C again to quit at once)\n")
    stop.abort(new RunAborted("the run was stopped by a signal"))
  }
  process.on("SIGINT", onSignal)
  process.on("SIGTERM", onSignal)
  try {
    const run = {
      runId: `local-${randomBytes(4).toString("hex")}`,
      // Per file, so that two pipeline files do not share caches (their keys start with the pipeline id).
      pipelineId: localPipelineId(file),
      pipelineName: basename(file, extname(file)),
      filename: file,
      source,
      triggeredBy: "manual" as const,
      args,
    }
    const deps = {
      driver,
      driverName,
      store,
      secrets: staticSecrets(secrets),
      observer: new TerminalObserver(process.stdout, process.stderr),
      limits,
      mockImage: settings.mockImage,
      network: settings.network,
      // No server: versions live as long as the run, and set_pipeline says it needs one.
      versions: memoryVersions(),
    }
    const result = await engineFor(contentType).run(run, deps, stop.signal)
    return result.code
  } finally {
    process.off("SIGINT", onSignal)
    process.off("SIGTERM", onSignal)
    await leftovers
    await store.close()
    await driver.close()
    if (scratch !== undefined) await rm(scratch, { recursive: true, force: true })
  }
}

/** `local-` and a short hash of the file's absolute path: stable across runs of one file. */
export function localPipelineId(file: string): string {
  return `local-${createHash("sha256").update(resolve(file)).digest("hex").slice(0, 8)}`
}

/** By the extension, else by the content (contract.md section 4). */
function contentTypeOfFile(file: string, source: string): ContentType {
  const extension = extname(file).toLowerCase()
  if (extension === ".yml" || extension === ".yaml") return "yaml"
  if (extension === ".ts" || extension === ".mts" || extension === ".js" || extension === ".mjs") return "ts"
  return inferContentType(source)
}

async function readPipeline(file: string): Promise<string> {
  try {
    return await readFile(file, "utf8")
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code
    const reason = code === "ENOENT" ? "no such file" : code === "EISDIR" ? "it is a directory" : errorMessage(error)
    throw badRequest(`cannot read pipeline file "${file}": ${reason}`)
  }
}
