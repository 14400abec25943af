import { readFile } from "node:fs/promises"
import { basename, extname } from "node:path"
import type { Command } from "commander"
import { parseKeyValues, readFlags } from "../lib/config/flags.ts"
import { badRequest, errorMessage, SystemError } from "../lib/core/errors.ts"
import { type ApiClient, apiClient, clientFlags } from "./api-client.ts"
import { addFlags } from "./flags.ts"

/** A command's own options: command line only; only the client flags have CI_* variables. */
type Option = { readonly syntax: string; readonly description: string; readonly repeatable?: boolean }

const setOptions: readonly Option[] = [
  { syntax: "--name <NAME>", description: "the pipeline's name; default the file's base name" },
  { syntax: "--driver <NAME>", description: "runs its tasks; default the server's --driver" },
  { syntax: "--driver-config <JSON>", description: 'the driver\'s settings, a JSON object: {"host": "..."}' },
  { syntax: "--rbac <EXPR>", description: "who may see and run it (a CEL expression)" },
  { syntax: "--webhook-secret <SECRET>", description: 'verifies its incoming webhooks; "" removes it' },
  {
    syntax: "-e, --secret <KEY=VALUE>",
    description: "a secret of this pipeline, stored encrypted, never shown again (repeatable)",
    repeatable: true,
  },
]
const runOptions: readonly Option[] = [
  {
    syntax: "--global-secret <KEY=VALUE>",
    description: "a global secret for this run only; the pipeline's own secrets still win (repeatable)",
    repeatable: true,
  },
]
const triggerOptions: readonly Option[] = [
  { syntax: "--args <ARG>", description: "an argument for pipelineContext.args (repeatable)", repeatable: true },
]
const lsOptions: readonly Option[] = [{ syntax: "--json", description: "the pipeline objects as JSON" }]

const contentTypes: Record<string, string> = {
  ".ts": "ts",
  ".mts": "ts",
  ".js": "js",
  ".mjs": "js",
  ".yaml": "yaml",
  ".yml": "yaml",
}

/** `runnel pipeline ...`: the client commands of contract.md section 3, over the REST API. */
export function pipelineCommand(program: Command): void {
  const pipeline = program.command("pipeline").description("store, trigger and list pipelines on a runnel server")
  const client = (name: string, description: string, own: readonly Option[] = []) => {
    const command = pipeline.command(name).description(description)
    for (const option of own) {
      if (option.repeatable) {
        command.option(option.syntax, option.description, (value: string, previous: string[] = []) => [
          ...previous,
          value,
        ])
      } else {
        command.option(option.syntax, option.description)
      }
    }
    addFlags(command, clientFlags)
    return command
  }
  const flagsOf = (options: Record<string, unknown>) => readFlags(clientFlags, options)

  client("set", "store a pipeline file (PUT /api/pipelines/:name)", setOptions)
    .argument("<file>", "pipeline file: .ts, .js or .yaml")
    .action(async (file: string, options: Record<string, unknown>) => {
      const api = apiClient(flagsOf(options))
      const body = await pipelineBody(file, options)
      const name = typeof options.name === "string" ? options.name : basename(file, extname(file))
      const answer = await api.call("PUT", `/api/pipelines/${encodeURIComponent(name)}`, body)
      process.stdout.write(`pipeline "${name}" ${answer.status === 201 ? "created" : "updated"}\n`)
    })

  client("run", "start a run, stream its output here, and exit with its code; Ctrl-C detaches", runOptions)
    .argument("<name>", "the pipeline's name or id")
    .argument("[args...]", "arguments after -- become pipelineContext.args")
    .usage("NAME [options] [-- ARGS...]")
    .action(async (name: string, args: string[], options: Record<string, unknown>) => {
      const globalSecrets = parseKeyValues((options.globalSecret as string[] | undefined) ?? [], "global-secret")
      process.exitCode = await run(apiClient(flagsOf(options)), name, args, globalSecrets)
    })

  client("trigger", "start a run and print its id, without waiting for it", triggerOptions)
    .argument("<name>", "the pipeline's name or id")
    .action(async (name: string, options: Record<string, unknown>) => {
      const args = (options.args as string[] | undefined) ?? []
      const answer = await apiClient(flagsOf(options)).call(
        "POST",
        `/api/pipelines/${encodeURIComponent(name)}/trigger`,
        {
          mode: args.length > 0 ? "args" : "manual",
          args,
        },
      )
      process.stdout.write(`${(answer.body as { run_id: string }).run_id}\n`)
    })

  client("ls", "list the stored pipelines", lsOptions).action(async (options: Record<string, unknown>) => {
    const pipelines = await listAll(apiClient(flagsOf(options)))
    if (options.json === true) {
      process.stdout.write(`${JSON.stringify(pipelines, null, 2)}\n`)
      return
    }
    process.stdout.write(
      table([
        ["NAME", "TYPE", "DRIVER", "PAUSED", "UPDATED"],
        ...pipelines.map((p) => [p.name, p.content_type, p.driver, p.paused ? "yes" : "no", p.updated_at]),
      ]),
    )
  })

  for (const [action, done, route] of [
    ["rm", "removed", undefined],
    ["pause", "paused", "pause"],
    ["unpause", "unpaused", "unpause"],
  ] as const) {
    const description =
      action === "rm"
        ? "delete a pipeline with its runs"
        : action === "pause"
          ? "refuse runs and triggers of a pipeline until unpaused"
          : "accept runs and triggers of a paused pipeline again"
    client(action, description)
      .argument("<name>", "the pipeline's name or id")
      .action(async (name: string, options: Record<string, unknown>) => {
        const api = apiClient(flagsOf(options))
        const path = `/api/pipelines/${encodeURIComponent(name)}`
        if (route === undefined) await api.call("DELETE", path)
        else await api.call("POST", `${path}/${route}`)
        process.stdout.write(`pipeline "${name}" ${done}\n`)
      })
  }
}

/** Streams a new run's output to stdout and stderr; answers the run's exit code (130 when detached). */
async function run(
  api: ApiClient,
  name: string,
  args: readonly string[],
  globalSecrets: Readonly<Record<string, string>>,
): Promise<number> {
  const detach = new AbortController()
  const onInterrupt = () => detach.abort()
  process.once("SIGINT", onInterrupt)
  let runPath: string | undefined
  try {
    const body = {
      args,
      trigger_type: "cli",
      ...(Object.keys(globalSecrets).length > 0 ? { global_secrets: globalSecrets } : {}),
    }
    const events = api.events(
      "POST",
      `/api/pipelines/${encodeURIComponent(name)}/run`,
      body,
      detach.signal,
      (headers) => {
        runPath = headers.get("Location") ?? undefined
      },
    )
    for await (const event of events) {
      const { stream, data, event: kind, code, message } = event as Record<string, unknown>
      if (stream === "stdout" || stream === "stderr") {
        await write(stream === "stdout" ? process.stdout : process.stderr, String(data))
      } else if (kind === "error") {
        await write(process.stderr, `runnel: ${String(message)}\n`)
      } else if (kind === "exit") {
        return typeof code === "number" ? code : 1
      }
    }
    if (detach.signal.aborted) {
      const runId = runPath?.split("/").pop()
      process.stderr.write(
        runId === undefined
          ? `runnel: detached; the run goes on on the server. Find it with GET ${api.url}/api/runs?pipeline_id=${encodeURIComponent(name)} and stop it with POST ${api.url}/api/runs/<id>/stop\n`
          : `runnel: detached; run ${runId} goes on on the server. Follow it with GET ${api.url}${runPath}/events, stop it with POST ${api.url}${runPath}/stop\n`,
      )
      return 130
    }
    throw new SystemError(
      `the event stream from ${api.url} ended before the run finished; see GET ${api.url}/api/runs?pipeline_id=${encodeURIComponent(name)}`,
    )
  } finally {
    process.off("SIGINT", onInterrupt)
  }
}

function write(stream: NodeJS.WriteStream, text: string): Promise<void> {
  return new Promise((resolve) => {
    if (stream.write(text)) resolve()
    else stream.once("drain", () => resolve())
  })
}

type PipelineRow = { name: string; content_type: string; driver: string; paused: boolean; updated_at: string }

async function listAll(api: ApiClient): Promise<PipelineRow[]> {
  const rows: PipelineRow[] = []
  for (let page = 1; ; page++) {
    const body = (await api.call("GET", `/api/pipelines?page=${page}&per_page=100`)).body as {
      items: PipelineRow[]
      has_next: boolean
    }
    rows.push(...body.items)
    if (!body.has_next) return rows
  }
}

async function pipelineBody(file: string, flags: Readonly<Record<string, unknown>>): Promise<Record<string, unknown>> {
  let content: string
  try {
    content = await readFile(file, "utf8")
  } catch (error) {
    throw badRequest(`cannot read pipeline file "${file}": ${errorMessage(error)}`)
  }
  const body: Record<string, unknown> = { content }
  const contentType = contentTypes[extname(file).toLowerCase()]
  if (contentType !== undefined) body.content_type = contentType
  if (typeof flags.driver === "string") body.driver = flags.driver
  if (typeof flags.rbac === "string") body.rbac_expression = flags.rbac
  if (typeof flags.webhookSecret === "string") body.webhook_secret = flags.webhookSecret
  const secrets = parseKeyValues((flags.secret as string[] | undefined) ?? [], "secret")
  if (Object.keys(secrets).length > 0) body.secrets = secrets
  const driverConfig = flags.driverConfig
  if (typeof driverConfig === "string") {
    let parsed: unknown
    try {
      parsed = JSON.parse(driverConfig)
    } catch (error) {
      throw badRequest(`--driver-config is not valid JSON (${errorMessage(error)}); write it as '{"host": "..."}'`)
    }
    if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
      throw badRequest(`--driver-config must be a JSON object, for example '{"host": "..."}'`)
    }
    body.driver_config = parsed
  }
  return body
}

function table(rows: readonly (readonly string[])[]): string {
  const widths = rows[0]?.map((_, column) => Math.max(...rows.map((row) => (row[column] ?? "").length))) ?? []
  return rows
    .map((row) =>
      row
        .map((cell, column) => (column === row.length - 1 ? cell : cell.padEnd(widths[column] ?? 0)))
        .join("  ")
        .trimEnd(),
    )
    .map((line) => `${line}\n`)
    .join("")
}
