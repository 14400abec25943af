import { type ChildProcess, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { writeFileSync } from "node:fs"
import { mkdir, readdir, readFile, rm, symlink, writeFile } from "node:fs/promises"
import { constants } from "node:os"
import { dirname, join, posix, resolve } from "node:path"
import type { Writable } from "node:stream"
import { errorMessage, SystemError } from "../../../lib/core/errors.ts"
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
import { findExecutable, inMountNamespace, type MountNamespace, probeMountNamespace } from "./mount-namespace.ts"
import { groupRecord, killRecordedGroup } from "./process-group.ts"

export type NativeDefaults = {
  /** Where run directories go, e.g. `<tmpdir>/runnel`. */
  readonly workRoot: string
  /** The PATH tasks get unless their env sets one. */
  readonly path: string
  /** The `unshare` program that makes a task's mount namespace (mount-namespace.ts); default `unshare` on PATH. */
  readonly unshare?: string
}

/** Inside a run directory: who made it, so removeLeftovers() can tell a crashed owner from a live one. */
const ownerFile = "owner"

/**
 * Inside a run directory: one file per running task, named after its process group and holding
 * groupRecord(), so removeLeftovers() can kill what a killed owner left running.
 */
const groupsDir = "groups"

/**
 * Every native task starts behind a gate: a shell that waits for a line on fd 3, then execs the task
 * (the same process, so the same group). runnel records the group before it opens the gate; should
 * runnel die first, the pipe closes, `read` fails, and the task never runs.
 */
const gateShell = "/bin/sh"
/** The shell exports a PWD of its own: it is taken away again, unless the task's env sets one. */
const gate = (keepPwd: boolean) => `IFS= read -r _ <&3 || exit 125; exec 3<&-; ${keepPwd ? "" : "unset PWD; "}exec "$@"`

/**
 * Inside the work root: one directory per cache key, kept between runs. No run directory has this
 * name (they end in `-<hex>`), and removeLeftovers() skips it by name, not by its lack of an owner.
 */
const cachesDir = "caches"

/**
 * Runs each task as a local process: no isolation, for machines without
 * Docker and for fast feedback. The image is ignored.
 *
 * A task's container paths (its mounts and workDir) are mapped into a root
 * directory of its own, `<run dir>/tasks/<n>-<name>`, made when the task
 * starts and removed when it ends:
 * - each mount is a symlink at root + mount path to its volume's directory;
 * - the task runs in root + workDir (root itself without a workDir), made when
 *   missing. A workDir at or below a mount is that place in the volume's
 *   directory itself, so what a task writes there stays in the volume.
 * So `/tmp/build/x` with inputs at `/tmp/build/x/in` and `/tmp/build/x/out`
 * sees `in/` and `out/`, as Concourse tasks expect. What the task writes
 * outside its mounts goes with its root, as a container's filesystem would.
 *
 * A task with mounts also runs in a mount namespace of its own where the
 * machine allows one (mount-namespace.ts): each volume is bound at its
 * absolute path too, so `/data/x` reaches the volume mounted at `/data`.
 * Where it does not, a mount outside the working directory is refused with
 * an error that says to use the docker driver.
 *
 * Beware, since this is not a container:
 * - Without mounts, or without a namespace, absolute paths are the host's: a
 *   task writing `/data/x` writes the host's `/data/x`.
 * - A mount is a symlink, and the kernel resolves `..` physically: `..` from
 *   inside a mount leads to the run's volumes directory, not to the mount's
 *   parent. `in/file` works; `../in/file` from inside another mount does not.
 * - A mount inside another mount needs the namespace, where it is bound at its
 *   path inside the outer volume (which gets the empty directory it is bound
 *   on, as in a container); without one it is refused, since its link would
 *   have to be written into the outer volume.
 * - HOME is the run directory, shared by the run's tasks.
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
  /** Probed once, when the first task with mounts starts. */
  #namespace: Promise<MountNamespace> | undefined

  constructor(defaults: NativeDefaults) {
    this.#defaults = defaults
  }

  async open(runId: string): Promise<RunDriver> {
    // Absolute, since a task's links name volume directories and a relative link target would be read from the link's directory.
    const workRoot = resolve(this.#defaults.workRoot)
    const runDir = join(workRoot, `${safeName(runId)}-${randomBytes(4).toString("hex")}`)
    await mkdir(join(runDir, "volumes"), { recursive: true })
    await mkdir(join(runDir, groupsDir))
    await writeFile(join(runDir, ownerFile), processOwner)
    const unshare = this.#defaults.unshare ?? "unshare"
    const probe = () => {
      this.#namespace ??= probeMountNamespace(unshare, this.#defaults.path)
      return this.#namespace
    }
    return new NativeRun(runDir, join(workRoot, cachesDir), this.#defaults.path, { unshare, probe })
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
          if (recorded === undefined || !ownerIsDead(recorded)) return
          await killGroups(join(runDir, groupsDir))
          await rm(runDir, { recursive: true, force: true })
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
  readonly #namespace: { readonly unshare: string; readonly probe: () => Promise<MountNamespace> }
  /** Tasks started, to name each task's root. */
  #tasks = 0
  #closing: Promise<void> | undefined

  constructor(
    runDir: string,
    cachesDir: string,
    path: string,
    namespace: { readonly unshare: string; readonly probe: () => Promise<MountNamespace> },
  ) {
    this.#runDir = runDir
    this.#cachesDir = cachesDir
    this.#path = path
    this.#namespace = namespace
  }

  async exec(task: TaskSpec, output: TaskOutput, signal: AbortSignal): Promise<TaskExit> {
    signal.throwIfAborted()
    this.#assertOpen(task)
    if (task.privileged === true) {
      throw new SystemError(
        `task "${task.path}" asks to run privileged, which the native driver cannot do: its tasks are processes of runnel's own user; run with --driver docker or kubernetes`,
      )
    }
    // Limits need cgroups of runnel's own, which a process of an ordinary user cannot make: said, not enforced.
    if (task.resources !== undefined) {
      output.stderr(Buffer.from("runnel: the native driver does not enforce resources; the task runs without limits\n"))
    }
    const root = join(this.#runDir, "tasks", `${++this.#tasks}-${safeName(task.name)}`)
    const { links, cwd, mounts, workDir, nested } = this.#layout(task, root)
    const newRoot = `${root}.ns`
    let namespaced = false
    if (mounts.length > 0) {
      const namespace = await this.#namespace.probe()
      namespaced = namespace.ok
      const outside = mounts.find((mount) => !within(mount.path, workDir))
      if (!namespace.ok && outside !== undefined) {
        throw new SystemError(
          `task "${task.path}" mounts "${outside.path}" outside its working directory "${workDir}": the native driver places such a mount only in a private mount namespace, which this machine refuses (${namespace.reason}); mount it below the working directory, or run with --driver docker`,
        )
      }
      if (nested !== undefined && (!namespace.ok || nested.outer === "/")) {
        const why = namespace.ok ? "" : ` (this machine refuses one: ${namespace.reason})`
        throw new SystemError(
          `task "${task.path}" mounts "${nested.inner}" inside "${nested.outer}", which the native driver can do only in a private mount namespace and not inside a mount at "/"${why}; mount them side by side, or run with --driver docker`,
        )
      }
    }
    try {
      await mkdir(root, { recursive: true })
      for (const { link, dir } of links) {
        await mkdir(dirname(link), { recursive: true })
        await symlink(dir, link)
      }
      await mkdir(cwd, { recursive: true })
      if (namespaced) await mkdir(newRoot, { recursive: true })
      signal.throwIfAborted()
      this.#assertOpen(task)
      // A mount at "/" holds the working directory (the links place it); binding it over the new root would hide the host.
      const binds = mounts.filter((mount) => mount.path !== "/")
      return await this.#spawn(task, cwd, output, signal, namespaced ? { newRoot, mounts: binds, workDir } : undefined)
    } finally {
      // rm() never follows a link, so the volumes stay. Should it fail, close() removes the run directory.
      // The new root's mounts went with the namespace, when the task's last process ended.
      await rm(root, { recursive: true, force: true }).catch(() => {})
      if (namespaced) await rm(newRoot, { recursive: true, force: true }).catch(() => {})
      // A close() while the root was being made may have run before mkdir() made the run directory again.
      if (this.#closing !== undefined)
        await this.#closing.then(() => rm(this.#runDir, { recursive: true, force: true }))
    }
  }

  async #spawn(
    task: TaskSpec,
    cwd: string,
    output: TaskOutput,
    signal: AbortSignal,
    namespace?: {
      readonly newRoot: string
      readonly mounts: readonly { path: string; dir: string }[]
      readonly workDir: string
    },
  ): Promise<TaskExit> {
    const env = { PATH: this.#path, HOME: this.#runDir, ...task.env }
    // Checked here, since behind the gate (and inside a namespace) a missing one is only exit code 127.
    if (!(await findExecutable(task.command.path, env.PATH, namespace === undefined ? cwd : undefined))) {
      throw spawnError(Object.assign(new Error("not found"), { code: "ENOENT" }), task.command.path, env.PATH)
    }
    // The last await before the abort listener: an abort meanwhile would find no listener and leave the task running.
    signal.throwIfAborted()
    // In the namespace the task works at its container paths, where the binds are (nested ones too).
    const command =
      namespace === undefined
        ? task.command
        : inMountNamespace(
            this.#namespace.unshare,
            namespace.newRoot,
            namespace.mounts,
            namespace.workDir,
            task.command,
          )
    // detached: the task leads its own process group, so killing -pid also kills what it started.
    // The gate, unshare, the namespace's shell and chroot each exec the next: the group leader is the task.
    const child = spawn(gateShell, ["-c", gate("PWD" in task.env), "runnel-gate", command.path, ...command.args], {
      cwd,
      env,
      detached: true,
      stdio: ["ignore", "pipe", "pipe", "pipe"],
    })
    // Written at once, synchronously, and only then is the gate opened: a runnel killed at any moment
    // leaves no task running that no record names (a gate whose pipe closes unopened runs nothing).
    const groupFile = child.pid === undefined ? undefined : join(this.#runDir, groupsDir, String(child.pid))
    if (child.pid !== undefined && groupFile !== undefined) {
      try {
        writeFileSync(groupFile, groupRecord(child.pid))
      } catch (error) {
        // Closed meanwhile (the run directory went), or the disk is full: a task no record names is not run.
        killGroup(child)
        throw new SystemError(`task "${task.path}" could not record its process group: ${errorMessage(error)}`)
      }
    }
    const opener = child.stdio[3] as Writable | null | undefined
    opener?.on("error", () => {}) // EPIPE: the gate's shell was killed (abort) before it read the line
    opener?.end("open\n")
    child.stdout?.on("data", (chunk: Buffer) => output.stdout(chunk))
    child.stderr?.on("data", (chunk: Buffer) => output.stderr(chunk))

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
      // The group was killed when its leader exited; a file left here only costs a look at /proc.
      if (groupFile !== undefined) await rm(groupFile, { force: true }).catch(() => {})
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

  /**
   * The links to make in the task's `root` (each to its volume's directory) and the task's working
   * directory; see the driver's comment. Checks the mounts before the task touches the disk.
   */
  #layout(
    task: TaskSpec,
    root: string,
  ): {
    links: { link: string; dir: string }[]
    cwd: string
    mounts: { path: string; dir: string }[]
    workDir: string
    nested?: { inner: string; outer: string }
  } {
    const mounts = Object.entries(task.mounts)
      .map(([path, volume]) => ({ path: containerPath(path), dir: this.#volumeDir(task, volume) }))
      .sort((a, b) => a.path.length - b.path.length)
    // Outer mounts first, so a mount inside another is bound after it (in a namespace only).
    const outerOf = (inner: { path: string }, i: number) =>
      mounts.slice(0, i).find((mount) => mount.path !== inner.path && within(inner.path, mount.path))
    const firstNested = mounts.findIndex((mount, i) => outerOf(mount, i) !== undefined)
    const inner = mounts[firstNested]
    const outer = inner === undefined ? undefined : outerOf(inner, firstNested)
    const workDir = containerPath(task.workDir ?? "/")
    const holder = mounts.findLast((mount) => within(workDir, mount.path))
    return {
      // No link inside another mount: it would be written into the outer volume. A mount at "/" holds the workDir.
      links: mounts
        .filter((mount, i) => mount.path !== "/" && outerOf(mount, i) === undefined)
        .map(({ path, dir }) => ({ link: join(root, path), dir })),
      cwd: holder === undefined ? join(root, workDir) : join(holder.dir, posix.relative(holder.path, workDir)),
      mounts,
      workDir,
      ...(inner === undefined || outer === undefined ? {} : { nested: { inner: inner.path, outer: outer.path } }),
    }
  }

  #volumeDir(task: TaskSpec, volume: Volume): string {
    const dir = this.#volumes.get(volume.name)?.dir
    if (dir === undefined) {
      throw new SystemError(`task "${task.path}" mounts volume "${volume.name}", which its run did not create`)
    }
    return dir
  }
}

/** An absolute, normalized container path without a trailing slash: `a/b/` and `/a//b` are `/a/b`. */
function containerPath(path: string): string {
  return posix.normalize(posix.join("/", path)).replace(/(.)\/$/, "$1")
}

/** Whether container path `path` is `parent` or lies below it. */
function within(path: string, parent: string): boolean {
  return path === parent || path.startsWith(parent === "/" ? "/" : `${parent}/`)
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

/** Kills the process groups recorded in `dir` (a dead owner's), waiting until each is gone. */
async function killGroups(dir: string): Promise<void> {
  const groups = await readdir(dir).catch(ifMissing([]))
  for (const name of groups) {
    const record = await readFile(join(dir, name), "utf8").catch(ifMissing(undefined))
    if (record === undefined) continue
    if (!(await killRecordedGroup(Number(name), record))) {
      throw new SystemError(
        `process group ${name}, a native task left running by a killed runnel, did not end within 10 s of SIGKILL; its run directory ${dirname(dir)} stays until it does`,
      )
    }
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
