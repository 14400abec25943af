import { type Command, CommanderError, Command as Program } from "commander"
import { apiserverFlags, apiserverSettings } from "../lib/config/apiserver.ts"
import { clientFlags, clientSettings } from "../lib/config/client.ts"
import { type FlagSpec, parseKeyValues } from "../lib/config/flags.ts"
import { operatorCommandFlags, operatorSettings } from "../lib/config/operator.ts"
import { runnerFlags, runnerSettings } from "../lib/config/runner.ts"
import { scheduleFireFlags, scheduleFireSettings } from "../lib/config/schedule-fire.ts"
import { serverFlags, serverSettings } from "../lib/config/server.ts"
import { RunnelError, SystemError } from "../lib/core/errors.ts"
import packageJson from "../package.json" with { type: "json" }
import { apiClient, ServerRefused } from "./api-client.ts"
import { drivers } from "./drivers.ts"
import { addFlags, collect } from "./flags.ts"

// Every command of `runnel`: its flag table, --help and settings are read here, and the action imports
// the code that does the work only when the command runs, so that each command loads only what it uses
// (`runnel pipeline ls` never loads client-node, dockerode or isolated-vm; `runnel runner` no Kubernetes client).

type Options = Record<string, unknown>

const program = new Program()
  .name("runnel")
  .description("runnel: pipelines as code, tasks as containers")
  .version(packageJson.version)
  .showHelpAfterError("(run with --help for usage)")
  .exitOverride()

/**
 * A serving role: its flag table and description here; on start, its settings (a bad flag fails
 * before anything heavy loads) and their warnings, then `run` imports the role's code and starts it.
 */
function role<S extends object>(
  name: string,
  description: string,
  flags: readonly FlagSpec[],
  settingsOf: (options: Options, driverNames: readonly string[]) => S,
  run: (settings: S) => Promise<void>,
): void {
  const command = program.command(name).description(description)
  addFlags(command, flags)
  command.action(async (options: Options) => {
    const settings = settingsOf(options, drivers.names())
    const warnings = "warnings" in settings ? (settings.warnings as readonly string[]) : []
    for (const warning of warnings) process.stderr.write(`${warning}\n`)
    await run(settings)
  })
}

role(
  "server",
  "serve runnel on one machine: the embedded Kubernetes API at /k8s (or the cluster of --kubeconfig), the operator, the API under /api, and the probes /livez, /readyz and /health",
  serverFlags,
  serverSettings,
  async (settings) => (await import("./server.ts")).server(settings),
)
role(
  "operator",
  "run the operator alone against a Kubernetes API (with runnel's CRDs installed): it executes Runs and checks Pipelines",
  operatorCommandFlags,
  operatorSettings,
  async (settings) => (await import("./operator.ts")).operator(settings),
)
role(
  "apiserver",
  "serve the REST API under /api and the probes alone, against a Kubernetes API with runnel's CRDs (--kubeconfig, $KUBECONFIG, or the cluster of its Pod)",
  apiserverFlags,
  apiserverSettings,
  async (settings) => (await import("./apiserver.ts")).apiserver(settings),
)

const runner = program
  .command("runner")
  .description("run a pipeline file on this machine, without a server; exits with the run's code")
  .argument("<file>", "pipeline script (.ts or .js) or Concourse-style YAML (.yml, .yaml)")
  .argument("[args...]", "arguments after -- become pipelineContext.args")
  .usage("FILE [options] [-- ARGS...]")
addFlags(runner, runnerFlags)
runner.action(async (file: string, args: string[], options: Options) => {
  const settings = runnerSettings(options, drivers.names())
  process.exitCode = await (await import("./runner.ts")).runner(file, args, settings)
})

/** A client command's own option: command line only; only the client flags have CI_* variables. */
type Option = { readonly syntax: string; readonly description: string; readonly repeatable?: boolean }

const scheduleCommand = program.command("schedule").description("fire schedules from a Schedule's CronJob")
const fire = scheduleCommand
  .command("fire")
  .description(
    "create the Run of one tick of a Schedule, named after the schedule and the tick: a second call for the same tick creates nothing",
  )
  .argument("<schedule>", "NAMESPACE/SCHEDULE")
addFlags(fire, scheduleFireFlags)
fire.action(async (target: string, options: Options) => {
  const settings = scheduleFireSettings(target, options)
  await (await import("./schedule-fire.ts")).fireSchedule(settings)
})

const pipeline = program.command("pipeline").description("store, trigger and list pipelines on a runnel server")
/** `runnel GROUP NAME` (pipeline by default): its own options and the client flags. */
function client(name: string, description: string, own: readonly Option[] = [], group: Command = pipeline): Command {
  const command = group.command(name).description(description)
  for (const option of own) {
    if (option.repeatable) {
      command.option(option.syntax, option.description, collect)
    } else {
      command.option(option.syntax, option.description)
    }
  }
  addFlags(command, clientFlags)
  return command
}
const clientOf = (options: Options) => {
  const settings = clientSettings(options)
  for (const warning of settings.warnings) process.stderr.write(`${warning}\n`)
  return apiClient(settings)
}
const pipelineCommands = () => import("./pipeline.ts")

client("set", "store a pipeline file (PUT /api/pipelines/:name)", [
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
])
  .argument("<file>", "pipeline file: .ts, .js or .yaml")
  .action(async (file: string, options: Options) => {
    const api = clientOf(options)
    await (await pipelineCommands()).setPipeline(api, file, options)
  })

client("run", "start a run, stream its output here, and exit with its code; Ctrl-C detaches", [
  {
    syntax: "--global-secret <KEY=VALUE>",
    description: "a global secret for this run only; the pipeline's own secrets still win (repeatable)",
    repeatable: true,
  },
])
  .argument("<name>", "the pipeline's name or id")
  .argument("[args...]", "arguments after -- become pipelineContext.args")
  .usage("NAME [options] [-- ARGS...]")
  .action(async (name: string, args: string[], options: Options) => {
    const globalSecrets = parseKeyValues((options.globalSecret as string[] | undefined) ?? [], "global-secret")
    const api = clientOf(options)
    process.exitCode = await (await pipelineCommands()).runPipeline(api, name, args, globalSecrets)
  })

client("trigger", "start a run and print its id, without waiting for it", [
  { syntax: "--args <ARG>", description: "an argument for pipelineContext.args (repeatable)", repeatable: true },
])
  .argument("<name>", "the pipeline's name or id")
  .action(async (name: string, options: Options) => {
    const api = clientOf(options)
    await (await pipelineCommands()).triggerPipeline(api, name, (options.args as string[] | undefined) ?? [])
  })

client("ls", "list the stored pipelines", [{ syntax: "--json", description: "the pipeline objects as JSON" }]).action(
  async (options: Options) => {
    const api = clientOf(options)
    await (await pipelineCommands()).listPipelines(api, options.json === true)
  },
)

for (const [action, description] of [
  ["rm", "delete a pipeline with its runs"],
  ["pause", "refuse runs and triggers of a pipeline until unpaused"],
  ["unpause", "accept runs and triggers of a paused pipeline again"],
] as const) {
  client(action, description)
    .argument("<name>", "the pipeline's name or id")
    .action(async (name: string, options: Options) => {
      const api = clientOf(options)
      await (await pipelineCommands()).changePipeline(api, action, name)
    })
}

const loginCommands = () => import("./login.ts")
client(
  "login",
  "log in to a server with its browser login (device flow): prints a URL and a code to enter there, waits for the approval, and stores the token in the auth config (mode 0600)",
  [],
  program,
).action(async (options: Options) => {
  const settings = clientSettings(options)
  for (const warning of settings.warnings) process.stderr.write(`${warning}\n`)
  await (await loginCommands()).login(apiClient(settings), settings)
})
client("logout", "forget the stored token of a server (-s) in the auth config", [], program).action(
  async (options: Options) => {
    ;(await loginCommands()).logout(clientSettings(options))
  },
)
client(
  "whoami",
  "print who the server takes you for: your actor and user fields",
  [{ syntax: "--json", description: "the fields as JSON" }],
  program,
).action(async (options: Options) => {
  const api = clientOf(options)
  await (await loginCommands()).whoami(api, options.json === true)
})

const gate = program.command("gate").description("list, approve and reject the approval gates runs wait on")
const gateCommands = () => import("./gate.ts")

client(
  "ls",
  "list a run's gates, or every pending gate",
  [{ syntax: "--json", description: "the gate objects as JSON" }],
  gate,
)
  .argument("[run]", "a run's id; without it, the pending gates of every run")
  .action(async (run: string | undefined, options: Options) => {
    const api = clientOf(options)
    await (await gateCommands()).listGates(api, run, options.json === true)
  })

for (const action of ["approve", "reject"] as const) {
  client(
    action,
    action === "approve"
      ? "approve a pending gate: the run waiting on it goes on"
      : "reject a pending gate: the run's gate call fails (a YAML gate step fails)",
    [{ syntax: "-m, --comment <COMMENT>", description: "why, recorded with the decision" }],
    gate,
  )
    .argument("<id>", "the gate's id (runnel gate ls)")
    .action(async (id: string, options: Options) => {
      const api = clientOf(options)
      const comment = typeof options.comment === "string" ? options.comment : undefined
      await (await gateCommands()).decideGate(api, action, id, comment)
    })
}

const runGroup = program.command("run").description("list, follow and stop the runs of a runnel server")
const runCommands = () => import("./run.ts")
const asJson = (what: string) => ({ syntax: "--json", description: `${what} as JSON` })

client(
  "ls",
  "list the newest runs: pipeline, status, exit code, trigger, when and how long",
  [
    { syntax: "--pipeline <NAME>", description: "only the runs of this pipeline (name or id)" },
    {
      syntax: "--status <STATUS>",
      description: "only runs in this status: queued, running, success, failure, error, aborted",
    },
    asJson("the run objects"),
  ],
  runGroup,
).action(async (options: Options) => {
  const api = clientOf(options)
  const filter = {
    ...(typeof options.pipeline === "string" ? { pipeline: options.pipeline } : {}),
    ...(typeof options.status === "string" ? { status: options.status } : {}),
  }
  await (await runCommands()).listRuns(api, filter, options.json === true)
})

client(
  "logs",
  "print a run's output, each line labelled with its task; -f follows it live and exits with the run's code",
  [
    { syntax: "-f, --follow", description: "follow the run until it ends, then exit with its exit code" },
    { syntax: "--task <PATH>", description: "only this task's output (a path from `runnel run tasks`)" },
    asJson("the events, one JSON object a line"),
  ],
  runGroup,
)
  .argument("<run>", "the run's id")
  .action(async (run: string, options: Options) => {
    const api = clientOf(options)
    process.exitCode = await (await runCommands()).runLogs(api, run, {
      follow: options.follow === true,
      json: options.json === true,
      ...(typeof options.task === "string" ? { task: options.task } : {}),
    })
  })

for (const [name, description, what, command] of [
  ["tasks", "list a run's tasks in start order: path, status, exit code, times", "the task objects", "listTasks"],
  [
    "stop",
    "stop a queued or running run: its tasks are killed, its status becomes aborted",
    "the run object",
    "stopRun",
  ],
] as const) {
  client(name, description, [asJson(what)], runGroup)
    .argument("<run>", "the run's id")
    .action(async (run: string, options: Options) => {
      const api = clientOf(options)
      await (await runCommands())[command](api, run, options.json === true)
    })
}

const schedule = pipeline.command("schedule").description("list, pause and unpause a pipeline's schedules")
client(
  "ls",
  "list a pipeline's schedules: type, expression, enabled, last and next run",
  [{ syntax: "--json", description: "the schedule objects as JSON" }],
  schedule,
)
  .argument("<name>", "the pipeline's name or id")
  .action(async (name: string, options: Options) => {
    const api = clientOf(options)
    await (await pipelineCommands()).listSchedules(api, name, options.json === true)
  })

for (const [action, description] of [
  ["pause", "stop a schedule from firing (its runs already started go on)"],
  ["unpause", "let a paused schedule fire again, from its next due time"],
] as const) {
  client(action, description, [], schedule)
    .argument("<name>", "the pipeline's name or id")
    .argument("<schedule>", "the schedule's name or id, or the job it runs")
    .action(async (name: string, key: string, options: Options) => {
      const api = clientOf(options)
      await (await pipelineCommands()).enableSchedule(api, action, name, key)
    })
}

client(
  "kubeconfig",
  "print a kubeconfig for kubectl against the server's embedded Kubernetes API at /k8s, with the current login (docs/auth.md, kubectl access)",
  [
    {
      syntax: "-n, --namespace <NAMESPACE>",
      description: "the namespace kubectl uses: the server's --namespace; default default",
    },
  ],
  program,
).action(async (options: Options) => {
  const settings = clientSettings(options)
  for (const warning of settings.warnings) process.stderr.write(`${warning}\n`)
  const namespace = typeof options.namespace === "string" ? options.namespace : "default"
  await (await import("./print-kubeconfig.ts")).printKubeconfig(settings, namespace)
})

try {
  await program.parseAsync(process.argv)
} catch (error) {
  if (error instanceof CommanderError) {
    process.exitCode = error.exitCode
  } else if (error instanceof ServerRefused) {
    // The server said no: its message, exit 1 (docs/decisions.md); 2 is kept for what never reached it.
    process.stderr.write(`runnel: ${error.message}\n`)
    process.exitCode = 1
  } else if (error instanceof RunnelError || error instanceof SystemError) {
    // A user's mistake or an unavailable dependency: the message says what to do; a stack trace would not.
    process.stderr.write(`runnel: ${error.message}\n`)
    process.exitCode = 2
  } else {
    throw error
  }
}
