import { spawn } from "node:child_process"
import { resolve } from "node:path"

export const root = resolve(import.meta.dirname, "..")
export const runnelBin = resolve(root, "bin/runnel")

export type CliResult = { code: number | null; stdout: string; stderr: string }

type RunOptions = { cwd?: string; env?: NodeJS.ProcessEnv }

/** Runs bin/runnel as a user would, from `cwd` (default: the project root). */
export function runnel(args: readonly string[], options: RunOptions = {}): Promise<CliResult> {
  return execute(runnelBin, args, options)
}

/** Runs any program (docker, make) as a user would, collecting its output and exit code. */
export function execute(file: string, args: readonly string[], options: RunOptions = {}): Promise<CliResult> {
  return new Promise((done, fail) => {
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
    child.on("error", fail)
    child.on("close", (code) => done({ code, stdout, stderr }))
  })
}
