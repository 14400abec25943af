import { type ChildProcess, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { mkdir, readdir, readFile, rm, writeFile } from "node:fs/promises"
import { constants } from "node:os"
import { join, posix } from "node:path"
import { SystemError } from "../../../lib/core/errors.ts"
import { ownerIsDead, processOwner } from "../../../lib/core/process-owner.ts"
import {
  assertCacheKey,
  assertVolumeKind,
  type Driver,
  type DriverFactory,
  type RunDriver,
  type TaskExit,
  type TaskOutput,
  type TaskSpec,
  type Volume,
  type VolumeOptions,
} from "../driver.ts"

export type NativeDefaults = {
  /** Where run directories go, e.g. `<tmpdir>/runnel`. */
  readonly workRoot: string
  /** The PATH tasks get unless their env sets one. */
  readonly path: string
}

/** Inside a run directory: who made it, so removeLeftovers() can tell a crashed owner from a live one. */
const ownerFile = "owner"

/**
 * Inside the work root: one directory per cache key, kept between runs. No run directory has this
 * name (they end in `-<hex>`), and removeLeftovers() skips it by name, not by its lack of an owner.
 */
const cachesDir = "caches"

/**
 * Runs each task as a local process: no isolation, for machines without
 * Docker and for fast feedback. The image is ignored. A mount is reachable
 * only as the task's workDir (or below it), since a process cannot see a
 * path like `/shared`.
 */
export function nativeDriverFactory(defaults: NativeDefaults): DriverFactory {
  return {
    name: "native",
    create: () => new NativeDriver(defaults),
  }
}

class NativeDriver implements Driver {
  readonly name = "native"
  readonly #defaults: NativeDefaults

  constructor(defaults: NativeDefaults) {
    this.#defaults = defaults
  }

  async open(runId: string): Promise<RunDriver> {
    const runDir = join(this.#defaults.workRoot, `${safeName(runId)}-${randomBytes(4).toString("hex")}`)
    await mkdir(join(runDir, "volumes"), { recursive: true })
    await writeFile(join(runDir, ownerFile), processOwner)
    return new NativeRun(runDir, join(this.#defaults.workRoot, cachesDir), this.#defaults.path)
  }

  async removeLeftovers(): Promise<void> {
    const entries = await readdir(this.#defaults.workRoot, { withFileTypes: true }).catch(ifMissing([]))
    await Promise.all(
      entries
        .filter((entry) => entry.isDirectory() && entry.name !== cachesDir)
        .map(async (entry) => {
          const runDir = join(this.#defaults.workRoot, entry.name)
          // No owner file: a directory being created right now, or not runnel's; leave it.
          const recorded = await readFile(join(runDir, ownerFile), "utf8").catch(ifMissing(undefined))
          if (recorded !== undefined && ownerIsDead(recorded)) await rm(runDir, { recursive: true, force: true })
        }),
    )
  }

  async close(): Promise<void> {}
}

class NativeRun implements RunDriver {
  readonly #runDir: string
  readonly #cachesDir: string
  readonly #path: string
  /** Process group leaders still running, with the promise that settles when each has closed its output. */
  readonly #running = new Map<ChildProcess, Promise<unknown>>()
  /** Volume name (or cache key) to its directory and whether it is a cache. */
  readonly #volumes = new Map<string, { readonly dir: string; readonly cache: boolean }>()
  #closing: Promise<void> | undefined

  constructor(runDir: string, cachesDir: string, path: string) {
    this.#runDir = runDir
    this.#cachesDir = cachesDir
    this.#path = path
  }

  async exec(task: TaskSpec, output: TaskOutput, signal: AbortSignal): Promise<TaskExit> {
    signal.throwIfAborted()
    this.#assertOpen(task)
    for (const volume of Object.values(task.mounts)) this.#volumeDir(task, volume)
    const cwd = this.#workDir(task)
    await mkdir(cwd, { recursive: true })
    signal.throwIfAborted()
    this.#assertOpen(task)
    const env = { PATH: this.#path, HOME: this.#runDir, ...task.env }
    // detached: the task leads its own process group, so killing -pid also kills what it started.
    const child = spawn(task.command.path, task.command.args, {
      cwd,
      env,
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
    })
    child.stdout.on("data", (chunk: Buffer) => output.stdout(chunk))
    child.stderr.on("data", (chunk: Buffer) => output.stderr(chunk))

    let timedOut = false
    const kill = () => killGroup(child)
    const timer =
      task.timeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            timedOut = true
            kill()
          }, task.timeoutMs)
    signal.addEventListener("abort", kill)
    // A container ends with its main process; so does a native task: what it left running in the
    // background is killed, which also closes the pipes those processes hold open.
    child.once("exit", kill)

    const closed = new Promise<number>((resolve, reject) => {
      child.once("error", (error: NodeJS.ErrnoException) => reject(spawnError(error, task.command.path, env.PATH)))
      child.once("close", (code, killedBy) =>
        resolve(code ?? 128 + (killedBy === null ? 0 : constants.signals[killedBy])),
      )
    })
    this.#running.set(
      child,
      closed.catch(() => {}),
    )
    try {
      const code = await closed
      signal.throwIfAborted()
      return { code, timedOut }
    } finally {
      clearTimeout(timer)
      signal.removeEventListener("abort", kill)
      this.#running.delete(child)
    }
  }

  async createVolume(name: string, options: VolumeOptions = {}): Promise<Volume> {
    const cache = options.cache === true
    if (cache) assertCacheKey(name)
    if (this.#closing !== undefined) throw new SystemError(`volume "${name}" was requested after its run was closed`)
    assertVolumeKind(name, cache, this.#volumes.get(name)?.cache)
    const dir = cache ? join(this.#cachesDir, name) : join(this.#runDir, "volumes", safeName(name))
    await mkdir(dir, { recursive: true })
    this.#volumes.set(name, { dir, cache })
    return { name }
  }

  close(): Promise<void> {
    this.#closing ??= (async () => {
      for (const child of this.#running.keys()) killGroup(child)
      await Promise.all(this.#running.values())
      await rm(this.#runDir, { recursive: true, force: true })
    })()
    return this.#closing
  }

  #assertOpen(task: TaskSpec): void {
    if (this.#closing !== undefined) throw new SystemError(`task "${task.path}" was started after its run was closed`)
  }

  /** A workDir inside a mount is the same place inside that volume's directory; any other is made in the run directory. */
  #workDir(task: TaskSpec): string {
    if (task.workDir === undefined) return this.#runDir
    const workDir = posix.normalize(posix.join("/", task.workDir))
    let best: { mountPath: string; volume: Volume } | undefined
    for (const [path, volume] of Object.entries(task.mounts)) {
      const mountPath = posix.normalize(posix.join("/", path)).replace(/(.)\/$/, "$1")
      const inside = workDir === mountPath || workDir.startsWith(mountPath === "/" ? "/" : `${mountPath}/`)
      if (inside && (best === undefined || mountPath.length > best.mountPath.length)) best = { mountPath, volume }
    }
    if (best === undefined) return join(this.#runDir, workDir)
    return join(this.#volumeDir(task, best.volume), posix.relative(best.mountPath, workDir))
  }

  #volumeDir(task: TaskSpec, volume: Volume): string {
    const dir = this.#volumes.get(volume.name)?.dir
    if (dir === undefined) {
      throw new SystemError(`task "${task.path}" mounts volume "${volume.name}", which its run did not create`)
    }
    return dir
  }
}

function killGroup(child: ChildProcess): void {
  if (child.pid === undefined) return
  try {
    process.kill(-child.pid, "SIGKILL")
  } catch {
    // ESRCH: the group has already gone. EPERM (every member changed user) cannot be helped from here,
    // and throwing from a timer or an event handler would take the whole process down.
  }
}

function spawnError(error: NodeJS.ErrnoException, executable: string, path: string | undefined): Error {
  if (error.code === "ENOENT") {
    const where = executable.includes("/") ? "" : ` on PATH ${path ?? "(unset)"}`
    return new SystemError(
      `executable "${executable}" not found${where}; install it on this machine, or run with --driver docker`,
      { cause: error },
    )
  }
  if (error.code === "EACCES") {
    return new SystemError(`executable "${executable}" is not executable (permission denied)`, { cause: error })
  }
  return new SystemError(`could not start "${executable}": ${error.message}`, { cause: error })
}

/** A file name: letters, digits, `_`, `.`, `-`, and no leading dot (so neither `.` nor `..`). */
function safeName(text: string): string {
  return text.replace(/[^A-Za-z0-9_.-]/g, "-").replace(/^\./, "_")
}

function ifMissing<T>(value: T): (error: NodeJS.ErrnoException) => T {
  return (error) => {
    if (error.code === "ENOENT") return value
    throw error
  }
}
