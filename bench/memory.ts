// Resident memory of `runnel server` (bin/runnel, native driver): idle once it has said it listens and
// settled, against `node -e` with @kubernetes/client-node imported under the same V8 flags; and what
// each run in flight adds, from the RSS with N runs of a native `sleep` task at once (the slope over N).
import { spawn } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { setTimeout as sleep } from "node:timers/promises"
import { median } from "./median.ts"
import type { BenchLine } from "./operator.ts"
import { startRunnelServer } from "./runnel-server.ts"

const root = join(import.meta.dirname, "..")
/** How long a process is left after start before its RSS is read: V8's start-up garbage settles by then. */
const settleMs = 5_000
const mib = (kib: number) => kib / 1024

/** VmRSS of a process, in MiB (Linux /proc). */
function rssMiB(pid: number): number {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))
  if (match?.[1] === undefined) throw new Error(`no VmRSS for process ${pid}`)
  return mib(Number(match[1]))
}

async function idleServer(dir: string): Promise<number> {
  const server = await startRunnelServer(mkdtempSync(join(dir, "idle-")))
  try {
    await sleep(settleMs)
    return rssMiB(server.pid)
  } finally {
    await server.stop()
  }
}

/** The floor: Node with the Kubernetes client loaded and nothing else, with bin/runnel's V8 flags. */
async function idleFloor(): Promise<number> {
  const child = spawn(
    join(root, "node_modules", ".bin", "node"),
    ["--max-semi-space-size=4", "-e", "require('@kubernetes/client-node'); setInterval(() => {}, 1000)"],
    // From the repository, where require() finds the package.
    { cwd: root, stdio: "ignore" },
  )
  const exited = new Promise((resolve) => child.on("exit", resolve))
  try {
    await sleep(settleMs)
    if (child.pid === undefined || child.exitCode !== null) throw new Error("the floor process did not start")
    return rssMiB(child.pid)
  } finally {
    child.kill()
    await exited
  }
}

export async function runIdleRssBench(line: BenchLine, reps: number): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "runnel-bench-idle-"))
  try {
    const server: number[] = []
    const floor: number[] = []
    for (let rep = 0; rep < reps; rep++) {
      floor.push(await idleFloor())
      server.push(await idleServer(dir))
    }
    line(
      "idle server RSS",
      `${median(server).toFixed(0)} MiB median`,
      `${median(floor).toFixed(0)} MiB client-node`,
      `+${(median(server) - median(floor)).toFixed(0)} MiB`,
      `< 150 MiB (${settleMs / 1000} s after listening; all ${server.map((v) => v.toFixed(0)).join(", ")})`,
    )
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

/** Starts `count` runs of the sleeping pipeline; resolves once each has ended, rejecting if one failed. */
async function startRuns(url: string, count: number): Promise<void> {
  await Promise.all(
    Array.from({ length: count }, async () => {
      const response = await fetch(`${url}/api/pipelines/sleepy/run`, { method: "POST" })
      const text = await response.text()
      if (!text.includes('"event":"exit","code":0')) throw new Error(`bench run did not succeed: ${text.slice(0, 300)}`)
    }),
  )
}

export async function runPerRunRssBench(line: BenchLine): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "runnel-bench-per-run-"))
  const counts = [10, 40]
  const server = await startRunnelServer(dir, ["--max-in-flight", String(Math.max(...counts))])
  try {
    const put = await fetch(`${server.url}/api/pipelines/sleepy`, {
      method: "PUT",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        content:
          'export const pipeline = async () => {\n  await runtime.run({ name: "nap", image: "busybox", command: { path: "sleep", args: ["8"] } })\n}\n',
        content_type: "ts",
        driver: "native",
      }),
    })
    if (!put.ok) throw new Error(`storing the bench pipeline failed: ${await put.text()}`)
    await startRuns(server.url, 2) // warm-up: the compiler, the first isolates, the log store's writer
    await sleep(settleMs)
    const idle = rssMiB(server.pid)
    const rss: number[] = []
    for (const count of counts) {
      const runs = startRuns(server.url, count)
      await sleep(5_000) // all started and sleeping; the task sleeps 8 s
      rss.push(rssMiB(server.pid))
      await runs
    }
    const [low = 0, high = 0] = rss
    const [few = 0, many = 0] = counts
    line(
      "RSS per run",
      `${((high - low) / (many - few)).toFixed(1)} MiB/run`,
      `${idle.toFixed(0)} MiB after warm-up`,
      "-",
      `documented (${counts.map((count, n) => `${count} runs at once: ${rss[n]?.toFixed(0)} MiB`).join(", ")})`,
    )
  } finally {
    await server.stop()
    rmSync(dir, { recursive: true, force: true })
  }
}
