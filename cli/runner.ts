import { createHash, randomBytes } from "node:crypto"
import { mkdtemp, readFile, rm } from "node:fs/promises"
import { tmpdir } from "node:os"
import { basename, extname, join, resolve } from "node:path"
import type { Command } from "commander"
import { type FlagSpec, parseKeyValues, parsePositiveInt, readFlags } from "../lib/config/flags.ts"
import { parseDuration } from "../lib/core/duration.ts"
import { badRequest, errorMessage } from "../lib/core/errors.ts"
import { openSqliteLogStore } from "../lib/logs/sqlite-log-store.ts"
import { type ContentType, inferContentType } from "../lib/script/content-type.ts"
import { staticSecrets } from "../lib/secrets/secret-resolver.ts"
import { engineFor } from "../operator/engine/pipeline-engine.ts"
import { RunAborted } from "../operator/engine/settle.ts"
import { memoryVersions } from "../operator/engine/yaml/interpret.ts"
import { driverRegistry } from "./drivers.ts"
import { addFlags, mockImageFlag } from "./flags.ts"
import { TerminalObserver } from "./terminal-observer.ts"

export const runnerFlags: readonly FlagSpec[] = [
  { name: "driver", value: "NAME", defaultValue: "docker", description: "runs the tasks: docker or native" },
  {
    name: "secret",
    value: "KEY=VALUE",
    repeatable: true,
    description: "a secret for `secret:KEY` env values (repeatable)",
  },
  {
    name: "storage-sqlite-path",
    value: "PATH",
    description:
      "SQLite file that keeps the run's task records and output; without it, a temporary file removed at the end",
  },
  { name: "pipeline-memory-mb", value: "MB", defaultValue: "128", description: "memory limit of the script's sandbox" },
  { name: "pipeline-timeout", value: "DURATION", defaultValue: "1h", description: "wall-clock limit of the whole run" },
  mockImageFlag,
]

export function runnerCommand(program: Command): void {
  const command = program
    .command("runner")
    .description("run a pipeline file on this machine, without a server; exits with the run's code")
    .argument("<file>", "pipeline script (.ts or .js) or Concourse-style YAML (.yml, .yaml)")
    .argument("[args...]", "arguments after -- become pipelineContext.args")
    .usage("FILE [options] [-- ARGS...]")
  addFlags(command, runnerFlags)
  command.action(async (file: string, args: string[], options: Record<string, unknown>) => {
    process.exitCode = await runner(file, args, options)
  })
}

async function runner(file: string, args: string[], options: Record<string, unknown>): Promise<number> {
  const flags = readFlags(runnerFlags, options)
  const driverName = String(flags.driver)
  const factory = driverRegistry().get(driverName)
  const secrets = parseKeyValues((flags.secret as string[] | undefined) ?? [], "secret")
  const limits = {
    memoryMb: parsePositiveInt(flags["pipeline-memory-mb"] as string, "pipeline-memory-mb"),
    timeoutMs: parseDuration(String(flags["pipeline-timeout"])),
  }
  const source = await readPipeline(file)
  const driver = factory.create({})
  const leftovers = driver.removeLeftovers().catch(() => {}) // the daemon may be down; a task will say so
  // Not :memory: by default: a task printing gigabytes must not hold them in memory.
  const scratch =
    flags["storage-sqlite-path"] === undefined ? await mkdtemp(join(tmpdir(), "runnel-runner-")) : undefined
  const store = await openSqliteLogStore(
    scratch === undefined ? String(flags["storage-sqlite-path"]) : join(scratch, "runnel.db"),
  )
  const contentType = contentTypeOfFile(file, source)
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
      mockImage: String(flags["mock-image"]),
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
