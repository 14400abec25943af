// npm run bench: runnel's costs against the floors of this machine, each floor
// measured in the same run, variants interleaved so drift hits both alike.
// `npm run bench -- startup` (or `node bench/main.ts startup yaml`) runs only the sections named.
import { execFileSync } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import Docker from "dockerode"
import ivm from "isolated-vm"
import { hostEnvironment } from "../lib/config/flags.ts"
import { errorMessage } from "../lib/core/errors.ts"
import { registry } from "../lib/core/registry.ts"
import type { LogStore } from "../lib/logs/log-store.ts"
import { openSqliteLogStore } from "../lib/logs/sqlite-log-store.ts"
import { compileScript } from "../lib/script/compile.ts"
import { staticSecrets } from "../lib/secrets/secret-resolver.ts"
import { dockerDriverFactory } from "../operator/drivers/docker/docker-driver.ts"
import type { Driver } from "../operator/drivers/driver.ts"
import { runScript } from "../operator/engine/engine.ts"
import { runInSandbox } from "../operator/engine/sandbox/sandbox.ts"
import { runApiBench } from "./api.ts"
import { benchCel } from "./cel.ts"
import { rawTask } from "./docker-floor.ts"
import { withKubernetesDriver } from "./kubernetes.ts"
import { runMcpBench } from "./mcp.ts"
import { median } from "./median.ts"
import { runIdleRssBench, runPerRunRssBench } from "./memory.ts"
import { runOperatorBench } from "./operator.ts"
import { quietObserver } from "./quiet-observer.ts"
import { runListBench } from "./run-list.ts"
import { runStartupBench } from "./startup.ts"
import { runUiBench } from "./ui.ts"
import { runWebhookBench } from "./webhooks.ts"
import { runYamlBench } from "./yaml.ts"

const reps = Number(process.env.BENCH_REPS ?? 3)
const time = async (work: () => Promise<unknown>) => {
  const started = performance.now()
  await work()
  return performance.now() - started
}
const line = (name: string, runnel: string, floor: string, ratio: string, target: string) =>
  console.log(`${name.padEnd(18)} ${runnel.padEnd(22)} ${floor.padEnd(22)} ${ratio.padEnd(14)} ${target}`)

let runs = 0
function taskScript(count: number, parallel: boolean): string {
  const task = (name: string) => `runtime.run({ name: ${name}, image: "busybox", command: { path: "true" } })`
  const body = parallel
    ? `const results = await Promise.all([${Array.from({ length: count }, (_, n) => task(`"t${n}"`)).join(", ")}])`
    : `const results = []\n for (let n = 0; n < ${count}; n++) results.push(await ${task('"t" + n')})`
  return `export const pipeline = async () => {\n ${body}\n for (const r of results) assert.equal(r.code, 0)\n}`
}

async function engineRun(driver: Driver, store: LogStore, source: string): Promise<void> {
  const driverName = driver.name
  const result = await runScript(
    {
      runId: `bench-${process.pid}-${++runs}`,
      pipelineId: "bench",
      pipelineName: "bench",
      filename: "bench.ts",
      source,
      triggeredBy: "manual",
      args: [],
    },
    {
      driver,
      driverName,
      store,
      secrets: staticSecrets({}),
      observer: quietObserver,
      limits: { memoryMb: 128, timeoutMs: 600_000 },
    },
    new AbortController().signal,
  )
  if (result.status !== "success") throw new Error(`bench run ended ${result.status}: ${result.message}`)
}

async function taskOverhead(docker: Docker, driver: Driver, store: LogStore, label = "") {
  const sequential = taskScript(20, false)
  const parallel = taskScript(8, true)
  const seq = { runnel: [] as number[], raw: [] as number[] }
  const par = { runnel: [] as number[], raw: [] as number[] }
  await engineRun(driver, store, taskScript(1, false)) // warm-up: esbuild's service, first container
  for (let rep = 0; rep < reps; rep++) {
    seq.raw.push(
      (await time(async () => {
        for (let n = 0; n < 20; n++) await rawTask(docker, ["true"])
      })) / 20,
    )
    seq.runnel.push((await time(() => engineRun(driver, store, sequential))) / 20)
    par.raw.push(await time(() => Promise.all(Array.from({ length: 8 }, () => rawTask(docker, ["true"])))))
    par.runnel.push(await time(() => engineRun(driver, store, parallel)))
  }
  const s = { runnel: median(seq.runnel), raw: median(seq.raw) }
  const p = { runnel: median(par.runnel), raw: median(par.raw) }
  line(
    `${label}per-task overhead`,
    `${s.runnel.toFixed(1)} ms/task`,
    `${s.raw.toFixed(1)} ms/task`,
    `${(s.runnel / s.raw).toFixed(3)}`,
    "≤ 1.10",
  )
  line(
    `${label}parallel (8 tasks)`,
    `${p.runnel.toFixed(0)} ms`,
    `${p.raw.toFixed(0)} ms`,
    `${(p.runnel / p.raw).toFixed(3)}`,
    "≤ 1.15",
  )
}

type Measured = { mbPerS: number; peakRssMiB: number; rssGrowthMiB: number }

function logThroughput() {
  const measure = (variant: string) =>
    JSON.parse(
      execFileSync(
        process.execPath,
        // Both variants with the V8 flags bin/runnel gives the server, so they differ only in the code they run.
        [
          "--disable-warning=ExperimentalWarning",
          "--max-semi-space-size=4",
          join(import.meta.dirname, "log-throughput.ts"),
          variant,
        ],
        {
          encoding: "utf8",
        },
      ),
    ) as Measured
  const raw: Measured[] = []
  const runnel: Measured[] = []
  for (let rep = 0; rep < reps; rep++) {
    raw.push(measure("raw"))
    runnel.push(measure("runnel"))
  }
  const rate = median(runnel.map((r) => r.mbPerS))
  const floor = median(raw.map((r) => r.mbPerS))
  const growth = (runs: Measured[]) => median(runs.map((r) => r.rssGrowthMiB))
  line(
    "log throughput",
    `${rate.toFixed(1)} MB/s`,
    `${floor.toFixed(1)} MB/s`,
    `${(rate / floor).toFixed(3)}`,
    "≥ 0.9 (200 MB of 81-byte lines, 5 secrets)",
  )
  line(
    "log RSS growth",
    `+${growth(runnel).toFixed(0)} MiB`,
    `+${growth(raw).toFixed(0)} MiB raw attach`,
    `${growth(runnel) >= growth(raw) ? "+" : ""}${(growth(runnel) - growth(raw)).toFixed(0)} MiB`,
    "≤ raw + 32 MiB (peak RSS over RSS at start, same 200 MB task)",
  )
}

async function sandboxStart() {
  const helpers = Array.from(
    { length: 45 },
    (_, n) =>
      `function step${n}(input: { name: string; n: number }): string {\n  return \`\${input.name}-\${input.n + ${n}}\`\n}`,
  ).join("\n")
  const source = `${helpers}\nexport const pipeline = async () => {\n  const names: string[] = []\n  names.push(step0({ name: "a", n: 1 }))\n  assert.equal(names.length, 1)\n}\n`
  const lines = source.split("\n").length
  const host = {
    runTask: async () => ({}),
    console: () => {},
    respond: () => false,
    webhookTrigger: () => true,
    gate: async () => ({}),
    fetch: async () => ({ status: 200, statusText: "OK", url: "", headers: [], body: new Uint8Array() }),
    decodeUtf8: () => "",
    notifyConfigs: () => {},
    notifySend: async () => {},
    resource: async () => ({}),
  }
  const globals = { pipelineContext: {}, request: undefined }
  const limits = { memoryMb: 128, timeoutMs: 60_000 }
  const once = async () => {
    const script = await compileScript(source, "bench.ts")
    await runInSandbox(script, globals, host, limits, new AbortController().signal)
  }
  for (let n = 0; n < 10; n++) await once()
  const samples: number[] = []
  for (let n = 0; n < 100; n++) samples.push(await time(once))
  line(
    "sandbox start",
    `${median(samples).toFixed(2)} ms median`,
    "-",
    "-",
    `< 10 ms (${lines}-line pipeline: compile, isolate, run)`,
  )
  // What a fresh isolate per run costs the machine, on every thread (isolated-vm's and V8's own included),
  // against a bare isolate and context made and disposed of: the floor of an isolate per run.
  const cpuPerRun = async (work: () => Promise<unknown>) => {
    const before = process.cpuUsage()
    for (let n = 0; n < 200; n++) await work()
    const used = process.cpuUsage(before)
    return (used.user + used.system) / 1000 / 200
  }
  const bare = async () => {
    const isolate = new ivm.Isolate({ memoryLimit: limits.memoryMb })
    await isolate.createContext()
    isolate.dispose()
  }
  const cpu = { runnel: [] as number[], bare: [] as number[] }
  for (let rep = 0; rep < reps; rep++) {
    cpu.bare.push(await cpuPerRun(bare))
    cpu.runnel.push(await cpuPerRun(once))
  }
  const runnel = median(cpu.runnel)
  line(
    "sandbox CPU/run",
    `${runnel.toFixed(2)} ms all threads`,
    `${median(cpu.bare).toFixed(2)} ms bare isolate`,
    `${(runnel / median(cpu.bare)).toFixed(3)}`,
    `- (isolates alone hold a run rate under ${Math.floor((2 * 1000) / runnel)}/s on 2 cores)`,
  )
}

type Shared = { docker: Docker; driver: Driver; store: LogStore }

/** The sections in the order they run; `node bench/main.ts startup api` runs only the ones named. */
const sections = registry<{ name: string; docker: boolean; run(shared: Shared): unknown }>("bench section", [
  { name: "sandbox", docker: false, run: () => sandboxStart() },
  { name: "tasks", docker: true, run: ({ docker, driver, store }) => taskOverhead(docker, driver, store) },
  // The kubernetes driver on the embedded API, whose Pods run in Docker, against the same raw Docker cycles.
  {
    name: "kubernetes-tasks",
    docker: true,
    run: ({ docker, store }) => withKubernetesDriver((driver) => taskOverhead(docker, driver, store, "k8s ")),
  },
  { name: "logs", docker: true, run: () => logThroughput() },
  { name: "yaml", docker: true, run: ({ driver, store }) => runYamlBench(line, driver, store, reps) },
  { name: "operator", docker: false, run: () => runOperatorBench(line) },
  { name: "api", docker: false, run: () => runApiBench(line, reps) },
  { name: "run-list", docker: false, run: () => runListBench(line) },
  { name: "webhooks", docker: false, run: () => runWebhookBench(line) },
  // The 1 GiB: about a minute to store and index on two cores; BENCH_MCP_MB makes it smaller.
  { name: "mcp", docker: false, run: () => runMcpBench(line, Number(process.env.BENCH_MCP_MB ?? 1024)) },
  {
    name: "cel",
    docker: false,
    run: async () =>
      line(
        "cel rule",
        `${((await benchCel()) / 1e6).toFixed(2)}M eval/s`,
        "-",
        "-",
        "> 1M/s (3-clause RBAC rule, compiled once)",
      ),
  },
  {
    name: "startup",
    docker: false,
    run: async () => {
      await runStartupBench(line, reps)
      await runIdleRssBench(line, reps)
    },
  },
  { name: "memory", docker: false, run: () => runPerRunRssBench(line) },
  { name: "ui", docker: false, run: () => runUiBench(line, reps) },
])
let chosen: ReturnType<typeof sections.get>[]
try {
  chosen =
    process.argv.length > 2
      ? process.argv.slice(2).map((name) => sections.get(name))
      : sections.names().map((name) => sections.get(name))
} catch (error) {
  console.error(`npm run bench [SECTION...]: ${errorMessage(error)}`)
  process.exit(2)
}

const docker = new Docker()
if (chosen.some((section) => section.docker)) {
  await docker.ping().catch(() => {
    console.error("npm run bench needs a Docker daemon with the busybox image: run `sudo bash .ci/docker-up`")
    process.exit(2)
  })
}
const dir = mkdtempSync(join(tmpdir(), "runnel-bench-"))
const store = await openSqliteLogStore(join(dir, "runnel.db"))
const driver = dockerDriverFactory({ host: hostEnvironment().dockerHost }).create({})
console.log(`runnel bench, ${reps} interleaved reps each, medians; floors measured in this run\n`)
line("what", "runnel", "floor", "ratio", "target")
try {
  for (const section of chosen) await section.run({ docker, driver, store })
} finally {
  await store.close()
  await driver.close()
  rmSync(dir, { recursive: true, force: true })
}
