// npm run soak: a long stretch of runs through a real `runnel server`, REST triggers and signed
// webhooks at once, a few with a container on the docker driver. Prints RSS, open file descriptors
// and the stores' bytes per run over time, and checks that they stay flat after warm-up, that every
// accepted trigger's run finishes, and that no container, volume, Pod or run directory is left.
// test/soak.test.ts runs the same code scaled down; SOAK_RUNS and SOAK_SECONDS scale it here.
import { execFileSync } from "node:child_process"
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs"
import { hostname, tmpdir } from "node:os"
import { join } from "node:path"
import { KubeConfig } from "@kubernetes/client-node"
import { quietLog } from "../lib/core/log.ts"
import { startInformer } from "../lib/kube/informer.ts"
import { ResourceClient } from "../lib/kube/resource-client.ts"
import { isFinal, type RunObject } from "../lib/kube/resources.ts"
import { median } from "./median.ts"
import { startRunnelServer } from "./runnel-server.ts"
import { body, headers, secret } from "./webhooks.ts"

export type SoakSettings = {
  /** Runs to start in all. */
  readonly runs: number
  /** The time to spread them over; when runnel falls behind, the load waits (see maxBacklog) and it takes longer. */
  readonly seconds: number
  /** Every n-th run is a pipeline with a busybox container on the docker driver. */
  readonly dockerEvery: number
  /** Table rows: samples taken at even intervals while the load runs. */
  readonly rows: number
  /** The share of the time before memory is expected to have settled (see flatness()). */
  readonly warmUpShare: number
  /** `--keep-runs`: finished runs the server keeps per pipeline; without it, runnel's default (1000). */
  readonly keepRuns?: number
}

export type SoakRow = {
  readonly second: number
  /** Runs seen finishing so far, kept or since deleted by retention. */
  readonly finished: number
  readonly backlog: number
  /** The highest RSS seen since the previous row. */
  readonly rssMiB: number
  /** RSS right after a full garbage collection at the row: what the server holds, without V8's garbage. */
  readonly collectedMiB: number
  /**
   * The fewest and most open descriptors seen since the previous row. Most are sockets between the
   * server's roles and its embedded API, whose number swings with the load (hundreds); a leaked
   * descriptor is never closed, so it raises the fewest.
   */
  readonly fdsMin: number
  readonly fdsMax: number
  readonly logBytesPerRun: number
  readonly resourceBytesPerRun: number
}

/** What went wrong (empty when the soak holds) and the table. */
export type SoakResult = { readonly rows: readonly SoakRow[]; readonly problems: readonly string[] }

/** Runs queued or running above which the load pauses: a flood of queued runs would measure the queue, not runnel. */
const maxBacklog = 200
const senders = 16

const pipelines = {
  rest: 'export const pipeline = async () => {\n  console.log("soak", pipelineContext.runID)\n}\n',
  hook: `export const pipeline = async () => {
  http.respond({ status: 200, body: { run_id: pipelineContext.runID } })
  console.log("soak", pipelineContext.runID)
}
`,
  docker: `export const pipeline = async () => {
  const result = await runtime.run({ name: "echo", image: "busybox", command: { path: "echo", args: [pipelineContext.runID] } })
  assert.equal(result.code, 0)
}
`,
} as const

export async function soak(settings: SoakSettings, print: (line: string) => void): Promise<SoakResult> {
  const dir = mkdtempSync(join(tmpdir(), "runnel-soak-"))
  const server = await startRunnelServer(
    dir,
    [
      "--max-queue-size",
      "100000",
      ...(settings.keepRuns === undefined ? [] : ["--keep-runs", String(settings.keepRuns)]),
    ],
    { inspect: true },
  )
  const heap = await fullCollections(server.inspector ?? "")
  // Retention deletes finished runs as the soak goes: how each ended is seen as it happens, on a watch.
  const ended = await endedRuns(server.url)
  const problems: string[] = []
  try {
    const api = async (method: string, path: string, payload?: unknown): Promise<Answer> => {
      const response = await fetch(`${server.url}${path}`, {
        method,
        headers: { "content-type": "application/json" },
        ...(payload === undefined ? {} : { body: JSON.stringify(payload) }),
      })
      return { status: response.status, body: (await response.json()) as Answer["body"] }
    }
    for (const [name, content] of Object.entries(pipelines)) {
      const put = await api("PUT", `/api/pipelines/soak-${name}`, {
        content,
        ...(name === "hook" ? { webhook_secret: secret } : {}),
        ...(name === "docker" ? { driver: "docker" } : {}),
      })
      if (put.status !== 201)
        throw new Error(`storing pipeline soak-${name} answered ${put.status}: ${JSON.stringify(put.body)}`)
    }
    const count = async (status: string) =>
      (await api("GET", `/api/runs?status=${status}&per_page=1`)).body.total_items as number
    let backlog = 0
    const readBacklog = async () => {
      backlog = (await count("queued")) + (await count("running"))
      return backlog
    }

    const accepted: string[] = []
    const refused = new Map<string, number>()
    const started = performance.now()
    let next = 0
    let loading = true
    const send = async (n: number) => {
      const kind = n % settings.dockerEvery === 0 ? "docker" : n % 2 === 0 ? "rest" : "hook"
      const response =
        kind === "hook"
          ? await fetch(`${server.url}/api/webhooks/soak-hook`, { method: "POST", headers, body })
          : await fetch(`${server.url}/api/pipelines/soak-${kind}/trigger`, { method: "POST" })
      const text = await response.text()
      if (response.status === 202 || (kind === "hook" && response.status === 200))
        accepted.push(JSON.parse(text).run_id)
      else refused.set(`${kind} ${response.status}`, (refused.get(`${kind} ${response.status}`) ?? 0) + 1)
    }
    const sender = async () => {
      for (let n = next++; n < settings.runs; n = next++) {
        const due = started + (n * settings.seconds * 1000) / settings.runs
        if (due > performance.now()) await sleep(due - performance.now())
        while (backlog > maxBacklog) await sleep(200)
        await send(n)
      }
    }
    // Read every half second, so that a row tells the range since the previous one, not one moment of it.
    let seen = { rssMiB: 0, fdsMin: Number.POSITIVE_INFINITY, fdsMax: 0 }
    const look = () => {
      const fds = readdirSync(`/proc/${server.pid}/fd`).length
      seen = {
        rssMiB: Math.max(seen.rssMiB, rssMiB(server.pid)),
        fdsMin: Math.min(seen.fdsMin, fds),
        fdsMax: Math.max(seen.fdsMax, fds),
      }
    }
    const watch = async () => {
      while (loading) {
        look()
        await readBacklog()
        await sleep(500)
      }
    }

    const rows: SoakRow[] = []
    const sample = async () => {
      const finished = ended.phases.size
      look()
      await heap.collect()
      const perRun = (bytes: number) => (finished === 0 ? 0 : Math.round(bytes / finished))
      const row: SoakRow = {
        second: Math.round((performance.now() - started) / 1000),
        finished,
        backlog: await readBacklog(),
        ...seen,
        collectedMiB: rssMiB(server.pid),
        logBytesPerRun: perRun(filesBytes(dir, "runnel-logs.db")),
        resourceBytesPerRun: perRun(filesBytes(dir, "runnel.db")),
      }
      rows.push(row)
      seen = { rssMiB: 0, fdsMin: Number.POSITIVE_INFINITY, fdsMax: 0 }
      print(
        [
          row.second,
          row.finished,
          row.backlog,
          row.rssMiB,
          row.collectedMiB,
          row.fdsMin,
          row.fdsMax,
          row.logBytesPerRun,
          row.resourceBytesPerRun,
        ]
          .map((cell) => String(cell).padStart(10))
          .join(""),
      )
    }
    print(
      ["second", "finished", "backlog", "peak RSS", "RSS at GC", "fds min", "fds max", "log B/run", "API B/run"]
        .map((cell) => cell.padStart(10))
        .join(""),
    )
    const sampler = (async () => {
      for (let row = 1; loading; row++) {
        await sleep(Math.max(0, started + (row * settings.seconds * 1000) / settings.rows - performance.now()))
        if (loading) await sample()
      }
    })()
    const watching = watch()
    await Promise.all(Array.from({ length: senders }, sender))
    loading = false
    await Promise.all([sampler, watching])
    const drainedBy = performance.now() + 120_000
    while ((await readBacklog()) > 0 && performance.now() < drainedBy) await sleep(500)
    await sample()

    for (const [what, times] of refused)
      problems.push(`${times} ${what.split(" ")[0]} triggers answered ${what.split(" ")[1]}`)
    problems.push(...unfinished(ended.phases, accepted))
    problems.push(...flatness(rows, settings.warmUpShare))
    problems.push(...leftovers(server.url, server.pid))
    problems.push(...(await podsLeft(server.url)))
    print(
      `${accepted.length} of ${settings.runs} triggers accepted in ${((performance.now() - started) / 1000).toFixed(0)} s`,
    )
    return { rows, problems }
  } finally {
    heap.close()
    await ended.stop()
    await server.stop()
    rmSync(dir, { recursive: true, force: true })
  }
}

/** The phase each Run ended in, by name, as a watch of the server's embedded API sees them end. */
async function endedRuns(url: string) {
  const kubeConfig = new KubeConfig()
  kubeConfig.loadFromClusterAndUser({ name: "embedded", server: `${url}/k8s`, skipTLSVerify: true }, { name: "anyone" })
  const client = new ResourceClient(kubeConfig, "default")
  const phases = new Map<string, string>()
  const informer = await startInformer<RunObject>({
    kubeConfig,
    path: client.path("runs"),
    namespace: "default",
    list: () => client.list("runs"),
    handlers: {
      changed: (run) => {
        if (isFinal(run)) phases.set(run.metadata?.name ?? "", run.status?.phase ?? "")
      },
      deleted: () => {},
    },
    log: quietLog,
  })
  return { phases: phases as ReadonlyMap<string, string>, stop: () => informer.stop() }
}

/** The accepted runs never seen ending, or that did not end in success. */
function unfinished(status: ReadonlyMap<string, string>, accepted: readonly string[]): string[] {
  const missing = accepted.filter((id) => !status.has(id))
  const failed = accepted.filter((id) => status.has(id) && status.get(id) !== "success")
  return [
    ...(missing.length === 0
      ? []
      : [`${missing.length} accepted runs were never seen ending, e.g. ${missing.slice(0, 3).join(", ")}`]),
    ...(failed.length === 0
      ? []
      : [
          `${failed.length} accepted runs did not succeed, e.g. ${failed
            .slice(0, 3)
            .map((id) => `${id} ${status.get(id)}`)
            .join(", ")}`,
        ]),
  ]
}

/**
 * Flat after warm-up: the rows after the warm-up share of the time are split in halves, and the later
 * half's medians are compared with the earlier's. RSS as read right after a full collection, within
 * 10% or 16 MiB, whichever is more: under load RSS saw-tooths (V8 lets a few hundred MiB of garbage
 * pile up before it collects, on a cycle of a minute or more), which says nothing of what is held;
 * the peaks are printed for the memory limit to allow. Open descriptors by each row's fewest, within
 * 10; the stores' bytes per run within 10% (they include the files' fixed part, so they fall as runs
 * add up).
 */
export function flatness(rows: readonly SoakRow[], warmUpShare: number): string[] {
  const end = rows.at(-1)?.second ?? 0
  const settled = rows.filter((row) => row.second > end * warmUpShare)
  if (settled.length < 4) return [`${settled.length} rows after warm-up are too few to compare halves; take more rows`]
  const earlier = settled.slice(0, Math.floor(settled.length / 2))
  const later = settled.slice(earlier.length)
  const problems: string[] = []
  const check = (
    name: string,
    summary: (values: number[]) => number,
    read: (row: SoakRow) => number,
    allowed: (base: number) => number,
  ) => {
    const base = summary(earlier.map(read))
    const now = summary(later.map(read))
    if (now > base + allowed(base)) {
      problems.push(`${name} grew from ${base} (after warm-up) to ${now} (at the end), over ${base + allowed(base)}`)
    }
  }
  check(
    "RSS MiB after a full collection",
    median,
    (row) => row.collectedMiB,
    (base) => Math.max(base * 0.1, 16),
  )
  check(
    "open file descriptors (the fewest in a row)",
    median,
    (row) => row.fdsMin,
    () => 10,
  )
  check(
    "log store bytes per run",
    median,
    (row) => row.logBytesPerRun,
    (base) => base * 0.1,
  )
  check(
    "API store bytes per run",
    median,
    (row) => row.resourceBytesPerRun,
    (base) => base * 0.1,
  )
  return problems
}

/** Containers, volumes and native run directories the server (`hostname:pid`, runnel's owner label) left. */
function leftovers(url: string, pid: number): string[] {
  const owner = `${hostname()}:${pid}`
  const docker = (...args: string[]) =>
    execFileSync("docker", [...args, "--filter", `label=dev.runnel.owner=${owner}`, "--quiet"], { encoding: "utf8" })
      .split("\n")
      .filter((line) => line !== "")
  const containers = docker("ps", "--all")
  const volumes = docker("volume", "ls")
  const workRoot = join(tmpdir(), "runnel")
  const entries = (() => {
    try {
      return readdirSync(workRoot, { withFileTypes: true })
    } catch {
      return [] // no native task ever ran on this machine
    }
  })()
  const runDirs = entries.filter((entry) => {
    if (!entry.isDirectory()) return false
    try {
      return readFileSync(join(workRoot, entry.name, "owner"), "utf8") === owner
    } catch {
      return false
    }
  })
  return [
    ...(containers.length === 0 ? [] : [`${containers.length} containers left behind (${url})`]),
    ...(volumes.length === 0 ? [] : [`${volumes.length} volumes left behind`]),
    ...(runDirs.length === 0 ? [] : [`${runDirs.length} native run directories left behind in ${workRoot}`]),
  ]
}

/** The Pods in the embedded API, which the server's drivers here never need: any is a leftover. */
async function podsLeft(url: string): Promise<string[]> {
  const response = await fetch(`${url}/k8s/api/v1/pods`)
  if (!response.ok) return [`listing the embedded API's Pods answered ${response.status}`]
  const pods = ((await response.json()) as { items: unknown[] }).items
  return pods.length === 0 ? [] : [`${pods.length} Pods left behind`]
}

function rssMiB(pid: number): number {
  const kib = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1]
  return Math.round(Number(kib) / 1024)
}

/** A SQLite database's bytes with its write-ahead log. */
function filesBytes(dir: string, name: string): number {
  return ["", "-wal"].reduce((sum, suffix) => {
    try {
      return sum + statSync(join(dir, `${name}${suffix}`)).size
    } catch {
      return sum
    }
  }, 0)
}

// biome-ignore lint/suspicious/noExplicitAny: JSON answers, read field by field.
type Answer = { status: number; body: any }

/** Full garbage collections of the server on demand, through its inspector (HeapProfiler.collectGarbage). */
async function fullCollections(inspector: string): Promise<{ collect(): Promise<void>; close(): void }> {
  const socket = new WebSocket(inspector)
  await new Promise((resolve, reject) => {
    socket.addEventListener("open", resolve, { once: true })
    socket.addEventListener("error", () => reject(new Error(`the server's inspector at ${inspector} refused`)), {
      once: true,
    })
  })
  let id = 0
  const waiting = new Map<number, () => void>()
  socket.addEventListener("message", (event) => {
    const answered = (JSON.parse(String(event.data)) as { id?: number }).id ?? 0
    waiting.get(answered)?.()
    waiting.delete(answered)
  })
  return {
    collect: () =>
      new Promise<void>((resolve) => {
        waiting.set(++id, resolve)
        socket.send(JSON.stringify({ id, method: "HeapProfiler.collectGarbage" }))
      }),
    close: () => socket.close(),
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

if (import.meta.main) {
  const settings = {
    runs: Number(process.env.SOAK_RUNS ?? 20_000),
    seconds: Number(process.env.SOAK_SECONDS ?? 600),
    dockerEvery: 50,
    rows: 20,
    warmUpShare: 0.25,
    // SOAK_KEEP_RUNS=0 keeps every run, as before retention; unset, the server's default.
    ...(process.env.SOAK_KEEP_RUNS === undefined ? {} : { keepRuns: Number(process.env.SOAK_KEEP_RUNS) }),
  }
  console.log(
    `soak: ${settings.runs} runs over about ${settings.seconds} s, REST triggers and signed webhooks at once, every ${settings.dockerEvery}th with a busybox container, --keep-runs ${settings.keepRuns ?? "default (1000)"}`,
  )
  const { problems } = await soak(settings, (line) => console.log(line))
  for (const problem of problems) console.log(`FAIL ${problem}`)
  console.log(problems.length === 0 ? "soak passed" : `soak failed: ${problems.length} problems`)
  process.exitCode = problems.length === 0 ? 0 : 1
}
