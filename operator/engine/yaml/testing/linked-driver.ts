import { spawn } from "node:child_process"
import { mkdir, rm, symlink } from "node:fs/promises"
import { constants } from "node:os"
import { dirname, join } from "node:path"
import { SystemError } from "../../../../lib/core/errors.ts"
import type {
  Driver,
  RunDriver,
  TaskExit,
  TaskOutput,
  TaskSpec,
  Volume,
  VolumeOptions,
} from "../../../drivers/driver.ts"

/**
 * For tests only: tasks as local processes, like the native driver, but every
 * mount is a symlink in a per-task root, so a task sees several volumes at
 * their container paths (Concourse's inputs under the working directory).
 * The native driver reaches a mount only as the workDir itself.
 */
export function linkedDriver(workRoot: string): Driver {
  let runs = 0
  return {
    name: "linked",
    open: async (runId) => {
      const runDir = join(workRoot, `${runId.replace(/[^A-Za-z0-9_.-]/g, "-")}-${++runs}`)
      await mkdir(join(runDir, "volumes"), { recursive: true })
      return new LinkedRun(runDir, join(workRoot, "caches"))
    },
    removeLeftovers: async () => {},
    close: async () => {},
  }
}

class LinkedRun implements RunDriver {
  readonly #runDir: string
  readonly #caches: string
  readonly #volumes = new Map<string, string>()
  #tasks = 0

  constructor(runDir: string, caches: string) {
    this.#runDir = runDir
    this.#caches = caches
  }

  async createVolume(name: string, options: VolumeOptions = {}): Promise<Volume> {
    const dir =
      options.cache === true ? join(this.#caches, name) : join(this.#runDir, "volumes", name.replace(/\//g, "-"))
    await mkdir(dir, { recursive: true })
    this.#volumes.set(name, dir)
    return { name }
  }

  async exec(task: TaskSpec, output: TaskOutput, signal: AbortSignal): Promise<TaskExit> {
    signal.throwIfAborted()
    const root = join(this.#runDir, "tasks", String(++this.#tasks))
    for (const [path, volume] of Object.entries(task.mounts).sort(([a], [b]) => a.length - b.length)) {
      const dir = this.#volumes.get(volume.name)
      if (dir === undefined) throw new SystemError(`volume "${volume.name}" was not created`)
      await mkdir(dirname(join(root, path)), { recursive: true })
      await symlink(dir, join(root, path))
    }
    const cwd = join(root, task.workDir ?? "/")
    await mkdir(cwd, { recursive: true })
    const child = spawn(task.command.path, task.command.args, {
      cwd,
      env: { PATH: "/usr/local/bin:/usr/bin:/bin", ...task.env },
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
    })
    child.stdout.on("data", (chunk: Buffer) => output.stdout(chunk))
    child.stderr.on("data", (chunk: Buffer) => output.stderr(chunk))
    let timedOut = false
    const kill = () => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL")
      } catch {}
    }
    const timer =
      task.timeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            timedOut = true
            kill()
          }, task.timeoutMs)
    signal.addEventListener("abort", kill)
    try {
      const code = await new Promise<number>((resolve, reject) => {
        child.once("error", (error) =>
          reject(new SystemError(`could not start "${task.command.path}": ${error.message}`)),
        )
        child.once("close", (code, by) => resolve(code ?? 128 + (by === null ? 0 : constants.signals[by])))
      })
      signal.throwIfAborted()
      return { code, timedOut }
    } finally {
      clearTimeout(timer)
      signal.removeEventListener("abort", kill)
    }
  }

  async close(): Promise<void> {
    await rm(this.#runDir, { recursive: true, force: true })
  }
}
