import { spawn } from "node:child_process"
import { resolve } from "node:path"

export const root = resolve(import.meta.dirname, "..")
export const runnelBin = resolve(root, "bin/runnel")

export type CliResult = { code: number | null; stdout: string; stderr: string }

type RunOptions = { cwd?: string; env?: NodeJS.ProcessEnv }

/** Runs bin/runnel as a user would, from `cwd` (default: the project root). */
export function runnel(args: readonly string[], options: RunOptions = {}): Promise<CliResult> {
  return startRunnel(args, options).done
}

/** bin/runnel in its own process, its output read as it comes: for a command a test watches while it runs. */
export function startRunnel(args: readonly string[], options: RunOptions = {}) {
  return start(runnelBin, args, options)
}

/** Runs any program (docker, make) as a user would, collecting its output and exit code. */
export function execute(file: string, args: readonly string[], options: RunOptions = {}): Promise<CliResult> {
  return start(file, args, options).done
}

function start(file: string, args: readonly string[], options: RunOptions) {
  const child = spawn(file, args, {
    cwd: options.cwd ?? root,
    env: { ...process.env, ...options.env },
    stdio: ["ignore", "pipe", "pipe"],
  })
  let stdout = ""
  let stderr = ""
  child.stdout.setEncoding("utf8").on("data", (text: string) => {
    stdout += text
  })
  child.stderr.setEncoding("utf8").on("data", (text: string) => {
    stderr += text
  })
  const done = new Promise<CliResult>((resolve, reject) => {
    child.on("error", reject)
    child.on("close", (code) => resolve({ code, stdout, stderr }))
  })
  return { child, stdout: () => stdout, stderr: () => stderr, done }
}
