import { type ChildProcess, spawn } from "node:child_process"
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
