// Start-up: how long a user waits for a command, each against plain `node -e 0` (the floor) measured in
// the same run, interleaved: `runnel pipeline ls` against a running server, `runnel runner` of a no-op
// pipeline with the native driver, and `runnel server` from exec to a 200 on /readyz. bin/runnel as a
// user runs it, with Node's compile cache warm (warm-up runs fill it).
import { spawn } from "node:child_process"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { median } from "./median.ts"
import type { BenchLine } from "./operator.ts"
import { startRunnelServer } from "./runnel-server.ts"

const root = join(import.meta.dirname, "..")
const runnelBin = join(root, "bin", "runnel")
const node = join(root, "node_modules", ".bin", "node")

/** Wall time of one process from spawn to exit; a non-zero exit fails the bench. */
function timed(command: string, args: readonly string[], cwd: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = performance.now()
    const child = spawn(command, args, { cwd, stdio: ["ignore", "ignore", "pipe"] })
    let stderr = ""
    child.stderr.setEncoding("utf8").on("data", (text: string) => {
      stderr += text
    })
    child.on("error", reject)
    child.on("exit", (code) => {
      if (code === 0) resolve(performance.now() - started)
      else reject(new Error(`${command} ${args.join(" ")} exited ${code}: ${stderr}`))
    })
  })
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer().listen(0, "127.0.0.1", () => {
      const address = probe.address()
      probe.close(() => (typeof address === "object" && address !== null ? resolve(address.port) : reject()))
    })
  })
}

/** `runnel server` on a fresh database: from exec to the first 200 on /readyz, then SIGTERM. */
async function serverToReady(dir: string): Promise<number> {
  const cwd = mkdtempSync(join(dir, "server-"))
  const port = await freePort()
  const started = performance.now()
  const child = spawn(
    runnelBin,
    ["server", "--port", String(port), "--driver", "native", "--storage-sqlite-path", join(cwd, "runnel.db")],
    { cwd, stdio: "ignore" },
  )
  const exited = new Promise<number | null>((resolve) => child.on("exit", resolve))
  try {
    for (;;) {
      if (child.exitCode !== null) throw new Error(`runnel server exited ${child.exitCode} before it was ready`)
      if (performance.now() - started > 30_000) throw new Error("runnel server was not ready within 30 s")
      const status = await fetch(`http://127.0.0.1:${port}/readyz`).then(
        (response) => response.status,
        () => 0, // not listening yet
      )
      if (status === 200) return performance.now() - started
      // Not tighter: on two cores, the polling would take CPU from the server it times.
      await new Promise((resolve) => setTimeout(resolve, 10))
    }
  } finally {
    child.kill("SIGTERM")
    await exited
  }
}

/** Medians of `once` and of `node -e 0`, interleaved, after two warm-up runs (the compile cache, the page cache). */
async function againstFloor(once: () => Promise<number>, dir: string, samples: number) {
  for (let n = 0; n < 2; n++) await once()
  const runnel: number[] = []
  const bare: number[] = []
  for (let n = 0; n < samples; n++) {
    bare.push(await timed(node, ["-e", "0"], dir))
    runnel.push(await once())
  }
  return { runnel: median(runnel), floor: median(bare) }
}

export async function runStartupBench(line: BenchLine, reps: number): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "runnel-bench-startup-"))
  const noop = join(dir, "noop.ts")
  writeFileSync(noop, "export const pipeline = async () => {}\n")
  const report = (name: string, { runnel, floor }: { runnel: number; floor: number }, target: number, what: string) =>
    line(
      name,
      `${runnel.toFixed(0)} ms median`,
      `${floor.toFixed(0)} ms node -e 0`,
      `${(runnel / floor).toFixed(1)}x`,
      `< ${target} ms median (${what})`,
    )
  try {
    // The server `pipeline ls` talks to runs for that measurement only, so it takes no CPU from the others.
    const server = await startRunnelServer(dir)
    try {
      const ls = () => timed(runnelBin, ["pipeline", "ls", "--server-url", server.url], dir)
      report("start: pipeline ls", await againstFloor(ls, dir, reps * 5), 150, "against a running server")
    } finally {
      await server.stop()
    }
    const runner = () => timed(runnelBin, ["runner", noop, "--driver", "native"], dir)
    report("start: runner", await againstFloor(runner, dir, reps * 5), 350, "no-op pipeline, native driver")
    report("start: server", await againstFloor(() => serverToReady(dir), dir, reps * 5), 1000, "exec to 200 on /readyz")
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}
