import { type ChildProcess, spawn } from "node:child_process"
import { join } from "node:path"

const runnelBin = join(import.meta.dirname, "..", "bin", "runnel")

/**
 * `runnel server --port 0 --driver native` with its files in `dir` (its
 * working directory too, so the secret store's default test.db lands there),
 * resolved once it prints its listening line, with its process id; stop() ends it with SIGTERM.
 */
export async function startRunnelServer(
  dir: string,
  args: readonly string[] = [],
): Promise<{ url: string; pid: number; stop(): Promise<void> }> {
  const child: ChildProcess = spawn(
    runnelBin,
    ["server", "--port", "0", "--driver", "native", "--storage-sqlite-path", join(dir, "runnel.db"), ...args],
    { cwd: dir, stdio: ["ignore", "pipe", "ignore"] },
  )
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
    async stop() {
      child.kill("SIGTERM")
      await exited
    },
  }
}
