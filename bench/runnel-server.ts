import { type ChildProcess, spawn } from "node:child_process"
import { readFileSync } from "node:fs"
import { join } from "node:path"

const runnelBin = join(import.meta.dirname, "..", "bin", "runnel")

/**
 * `runnel server --port 0 --driver native` with its files in `dir` (its
 * working directory too, so the secret store's default test.db lands there),
 * resolved once it prints its listening line (with its pid, which is node's: bin/runnel execs it);
 * stop() ends it with SIGTERM. `inspect` opens Node's inspector on a loopback port of its own
 * and answers its WebSocket URL, for a caller that must see inside (the soak's full collections).
 */
export async function startRunnelServer(
  dir: string,
  args: readonly string[] = [],
  options: { readonly inspect?: boolean } = {},
): Promise<{ url: string; pid: number; inspector: string | undefined; stop(): Promise<void> }> {
  const child: ChildProcess = spawn(
    runnelBin,
    ["server", "--port", "0", "--driver", "native", "--storage-sqlite-path", join(dir, "runnel.db"), ...args],
    {
      cwd: dir,
      stdio: ["ignore", "pipe", options.inspect ? "pipe" : "ignore"],
      ...(options.inspect ? { env: { ...process.env, NODE_OPTIONS: "--inspect=127.0.0.1:0" } } : {}),
    },
  )
  const inspector = new Promise<string | undefined>((resolve) => {
    if (!options.inspect) return resolve(undefined)
    let seen = ""
    child.stderr?.setEncoding("utf8").on("data", (text: string) => {
      seen += text
      const match = /Debugger listening on (ws:\/\/\S+)/.exec(seen)
      if (match?.[1] === undefined) return
      resolve(match[1])
      child.stderr?.removeAllListeners("data").resume()
    })
  })
  const url = await new Promise<string>((resolve, reject) => {
    let seen = ""
    child.stdout?.setEncoding("utf8").on("data", (text: string) => {
      seen += text
      const match = /listening on (http:\/\/\S+)/.exec(seen)
      if (match?.[1] !== undefined) resolve(match[1])
    })
    child.on("exit", (code) => reject(new Error(`runnel server exited ${code}`)))
  })
  child.stdout?.resume()
  const exited = new Promise((resolve) => child.on("exit", resolve))
  return {
    url,
    pid: child.pid ?? 0,
    inspector: await inspector,
    async stop() {
      child.kill("SIGTERM")
      await exited
    },
  }
}

/** The process's CPU time so far, in clock ticks (utime + stime of /proc/<pid>/stat; Linux ticks are 10 ms). */
function cpuTicks(pid: number): number {
  // The command name, in parentheses, may hold spaces: the fields are counted after it.
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? []
  return Number(fields[11]) + Number(fields[12])
}

/**
 * Resolves once the process has spent under 5% of a core for a second: a server started on a large
 * store keeps working after it listens (its indexes and garbage collector read every object), and a
 * latency measured then is its start-up's, not the steady state's. Rejects after `limitMs`.
 */
export async function untilIdle(pid: number, limitMs = 120_000): Promise<void> {
  const deadline = performance.now() + limitMs
  let quiet = 0
  let ticks = cpuTicks(pid)
  while (quiet < 4) {
    if (performance.now() > deadline) throw new Error(`process ${pid} was still busy after ${limitMs} ms`)
    await new Promise((resolve) => setTimeout(resolve, 250))
    const now = cpuTicks(pid)
    quiet = now - ticks <= 1 ? quiet + 1 : 0
    ticks = now
  }
}
