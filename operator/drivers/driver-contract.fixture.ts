import { createHash, randomBytes } from "node:crypto"
import { describe, expect, it, onTestFinished } from "vitest"
import { SystemError } from "../../lib/core/errors.ts"
import type { Driver, RunDriver, TaskOutput, TaskSpec, Volume } from "./driver.ts"

export type DriverContractOptions = {
  /** The image tasks name; drivers without images ignore it. Default `busybox`. */
  readonly image?: string
  /** What of the run still exists (containers, volumes, directories), so the suite can check close() removed it all. */
  readonly remains?: (runId: string) => Promise<readonly string[]>
  /** Removes a cache the suite made, which the contract itself never does; without it the suite leaves its caches behind. */
  readonly removeCache?: (key: string) => Promise<void>
  /** Whether the driver enforces a task's `resources` (containers do); one that does not says so on the task's stderr. Default true. */
  readonly enforcesResources?: boolean
  /** Whether the driver runs privileged tasks (containers do); one that cannot rejects with a SystemError naming itself. Default true. */
  readonly runsPrivileged?: boolean
}

/**
 * The behaviour every driver shares. Commands are `sh -c` scripts that busybox
 * and a Debian host both run, and files are named relative to the working
 * directory, so the same task works in a container and as a local process.
 */
export function driverContract(name: string, make: () => Driver, options: DriverContractOptions = {}): void {
  const image = options.image ?? "busybox"

  /** A driver and one run of it, both closed when the test ends. */
  async function openRun(
    runId = `contract-${randomBytes(4).toString("hex")}`,
  ): Promise<{ driver: Driver; run: RunDriver; runId: string }> {
    const driver = make()
    const run = await driver.open(runId)
    onTestFinished(async () => {
      await run.close()
      await driver.close()
    })
    return { driver, run, runId }
  }

  function shell(script: string, more: Partial<TaskSpec> = {}): TaskSpec {
    return {
      path: "tasks/1/contract",
      name: "contract",
      image,
      command: { path: "sh", args: ["-c", script] },
      env: {},
      mounts: {},
      ...more,
    }
  }

  /**
   * A cache key no other test (or earlier test process) uses, `length` long, removed when the test
   * ends. Call it before openRun(): test-finished callbacks run last-registered first, so the cache
   * goes after the runs that use it have closed.
   */
  function cacheKey(length = 16): string {
    const key = `contract-${randomBytes(4).toString("hex")}-`.padEnd(length, "x")
    onTestFinished(async () => {
      await options.removeCache?.(key)
    })
    return key
  }

  /** A task whose working directory is `volume`, the one way every driver can reach a mount. */
  function inVolume(script: string, volume: Volume): TaskSpec {
    return shell(script, { mounts: { "/volume": volume }, workDir: "/volume" })
  }

  const never = new AbortController().signal

  describe(`${name} driver`, () => {
    it("resolves with exit code 0 and the task's output", async () => {
      const { run } = await openRun()
      const output = collect()
      expect(await run.exec(shell("echo hello"), output, never)).toEqual({ code: 0, timedOut: false })
      expect(output.out()).toBe("hello\n")
      expect(output.err()).toBe("")
    })

    if (options.enforcesResources ?? true) {
      it("kills a task past its memory limit with 137, a line on stderr giving the reason", async () => {
        const { run } = await openRun()
        const output = collect()
        const task = shell("head -c 64m /dev/zero | tail", { resources: { memoryBytes: 16 * 1024 * 1024 } })
        expect(await run.exec(task, output, never)).toEqual({ code: 137, timedOut: false })
        // The shell may report its killed child ("Killed") first; the driver adds the reason.
        expect(output.err()).toMatch(
          /(^|\n)runnel: the task used more memory than its limit of 16Mi and was killed \(OOMKilled\)\n$/,
        )
      })

      it("limits the task's memory: the task sees its limit", async () => {
        const { run } = await openRun()
        const output = collect()
        const memoryFile =
          "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"
        await run.exec(shell(memoryFile, { resources: { memoryBytes: 32 * 1024 * 1024 } }), output, never)
        expect(output.out()).toBe("33554432\n")
      })

      it("says nothing of memory when a task fails within its limit", async () => {
        const { run } = await openRun()
        const output = collect()
        const task = shell("exit 137", { resources: { memoryBytes: 64 * 1024 * 1024 } })
        expect(await run.exec(task, output, never)).toEqual({ code: 137, timedOut: false })
        expect(output.err()).toBe("")
      })
    } else {
      it("runs a task with resources without limits, saying so on its stderr", async () => {
        const { run } = await openRun()
        const output = collect()
        const task = shell("echo ran", { resources: { memoryBytes: 16 * 1024 * 1024, cpuMillis: 500 } })
        expect(await run.exec(task, output, never)).toEqual({ code: 0, timedOut: false })
        expect(output.out()).toBe("ran\n")
        expect(output.err()).toBe(
          `runnel: the ${name} driver does not enforce resources; the task runs without limits\n`,
        )
      })
    }

    if (options.runsPrivileged ?? true) {
      // A privileged container can mount a filesystem; one that is not, cannot. Where the machine itself
      // withholds a capability (a Docker daemon inside a container, as on runnel's build machines), the
      // runtime refuses to start a privileged container, and the driver rejects with its words.
      it("runs a privileged task privileged: it mounts a tmpfs, or the runtime says it cannot grant every capability", async () => {
        const { run } = await openRun()
        const mount = "mount -t tmpfs none /mnt && echo mounted"
        expect((await run.exec(shell(mount), collect(), never)).code).not.toBe(0)
        const output = collect()
        const privileged = await run.exec(shell(mount, { privileged: true }), output, never).then(
          (exit) => ({ code: exit.code, message: "" }),
          (error: Error) => ({ code: undefined, message: error.message }),
        )
        if (privileged.code !== undefined) expect([privileged.code, output.out()]).toEqual([0, "mounted\n"])
        else expect(privileged.message).toMatch(/apply caps|operation not permitted/)
      })
    } else {
      it("rejects a privileged task with a SystemError naming the driver", async () => {
        const { run } = await openRun()
        const exec = run.exec(shell("echo ran", { privileged: true }), collect(), never)
        await expect(exec).rejects.toBeInstanceOf(SystemError)
        await expect(exec).rejects.toThrow(`which the ${name} driver cannot do`)
      })
    }

    it("resolves, not rejects, with a non-zero exit code", async () => {
      const { run } = await openRun()
      expect(await run.exec(shell("echo failing >&2; exit 3"), collect(), never)).toEqual({ code: 3, timedOut: false })
    })

    it("keeps stdout and stderr apart, each complete and in order", async () => {
      const { run } = await openRun()
      const output = collect()
      const script = 'i=1; while [ $i -le 300 ]; do echo "out $i"; echo "err $i" >&2; i=$((i+1)); done'
      await run.exec(shell(script), output, never)
      const lines = (prefix: string) => Array.from({ length: 300 }, (_, i) => `${prefix} ${i + 1}\n`).join("")
      expect(output.out()).toBe(lines("out"))
      expect(output.err()).toBe(lines("err"))
    })

    it("delivers a 20 MB output whole, in many chunks, before resolving", async () => {
      const { run } = await openRun()
      const size = 20_000_000
      const line = "0123456789abcdefghijklmnopqrstuvwxyz"
      const expected = Buffer.from(`${line}\n`.repeat(Math.ceil(size / (line.length + 1)))).subarray(0, size)
      const hash = createHash("sha256")
      let bytes = 0
      let chunks = 0
      const output: TaskOutput = {
        stdout(chunk) {
          hash.update(chunk)
          bytes += chunk.length
          chunks += 1
        },
        stderr() {},
      }
      expect(await run.exec(shell(`yes ${line} | head -c ${size}`), output, never)).toEqual({
        code: 0,
        timedOut: false,
      })
      expect(bytes).toBe(size)
      expect(chunks).toBeGreaterThan(10)
      expect(hash.digest("hex")).toBe(createHash("sha256").update(expected).digest("hex"))
    })

    it("passes the task's environment", async () => {
      const { run } = await openRun()
      const output = collect()
      const env = { GREETING: "hello there", EQUATION: "a=b" }
      await run.exec(shell('echo "$GREETING|$EQUATION"', { env }), output, never)
      expect(output.out()).toBe("hello there|a=b\n")
    })

    it("runs the task in its workDir", async () => {
      const { run } = await openRun()
      const output = collect()
      await run.exec(shell("echo kept > note.txt; pwd; cat note.txt", { workDir: "/scratch/deep" }), output, never)
      expect(output.out()).toMatch(/\/scratch\/deep\nkept\n$/)
    })

    it("shares a volume between the tasks that mount it", async () => {
      const { run } = await openRun()
      const shared = await run.createVolume("shared")
      const mounted = { mounts: { "/shared": shared }, workDir: "/shared" }
      expect(await run.exec(shell("echo from-first > greeting.txt", mounted), collect(), never)).toEqual({
        code: 0,
        timedOut: false,
      })
      const output = collect()
      await run.exec(shell("cat greeting.txt", mounted), output, never)
      expect(output.out()).toBe("from-first\n")
    })

    it("mounts volumes below the workDir, as Concourse mounts a task's inputs and outputs", async () => {
      const { run } = await openRun()
      const [input, output] = [await run.createVolume("input"), await run.createVolume("output")]
      await run.exec(inVolume("echo from-earlier > file", input), collect(), never)
      const build = shell("cat in/file; echo built > out/result; ls", {
        mounts: { "/tmp/build/t/in": input, "/tmp/build/t/out": output },
        workDir: "/tmp/build/t",
      })
      const built = collect()
      expect(await run.exec(build, built, never)).toEqual({ code: 0, timedOut: false })
      expect(built.out()).toBe("from-earlier\nin\nout\n")
      const later = collect()
      await run.exec(shell("cat result", { mounts: { "/elsewhere": output }, workDir: "/elsewhere" }), later, never)
      expect(later.out()).toBe("built\n")
    })

    it("runs concurrent tasks at the same time", async () => {
      const { run } = await openRun()
      const shared = await run.createVolume("rendezvous")
      // Each task waits for the other's file: they can only both finish if they overlap.
      const meet = (mine: string, theirs: string) =>
        shell(`touch ${mine}; while [ ! -f ${theirs} ]; do sleep 0.05; done; echo met`, {
          mounts: { "/meet": shared },
          workDir: "/meet",
          timeoutMs: 20_000,
        })
      const [first, second] = await Promise.all([
        run.exec(meet("a", "b"), collect(), never),
        run.exec(meet("b", "a"), collect(), never),
      ])
      expect([first, second]).toEqual([
        { code: 0, timedOut: false },
        { code: 0, timedOut: false },
      ])
    })

    it("kills a task that outlives its timeout and resolves with timedOut", async () => {
      const { run } = await openRun()
      const started = performance.now()
      const exit = await run.exec(shell("echo started; sleep 30", { timeoutMs: 500 }), collect(), never)
      expect(exit.timedOut).toBe(true)
      expect(exit.code).not.toBe(0)
      expect(performance.now() - started).toBeLessThan(10_000)
    })

    it("kills the task and rejects with the signal's reason when aborted", async () => {
      const { run } = await openRun()
      const controller = new AbortController()
      const reason = new Error("stopped by the contract test")
      const output = collect()
      const started = performance.now()
      const exec = run.exec(shell("echo started; sleep 30"), output, controller.signal)
      await until(() => output.out() === "started\n")
      controller.abort(reason)
      await expect(exec).rejects.toBe(reason)
      expect(performance.now() - started).toBeLessThan(10_000)
    })

    it("kills the task when aborted at any moment of its start", async () => {
      const { run } = await openRun()
      // Event-loop turns, then milliseconds: each lands somewhere in the task's start, between two of its awaits.
      const moments = [
        ...Array.from({ length: 12 }, (_, turns) => ({
          what: `${turns} turns`,
          wait: async () => {
            for (let turn = 0; turn < turns; turn++) await new Promise((resolve) => setImmediate(resolve))
          },
        })),
        ...[1, 2, 4, 8, 16, 32, 64].map((ms) => ({
          what: `${ms} ms`,
          wait: () => new Promise((resolve) => setTimeout(resolve, ms)),
        })),
      ]
      for (const { what, wait } of moments) {
        const controller = new AbortController()
        const reason = new Error(`stopped ${what} into the start`)
        const exec = run.exec(shell("sleep 30"), collect(), controller.signal)
        await wait()
        controller.abort(reason)
        let timer: NodeJS.Timeout | undefined
        const missed = new Promise((resolve) => {
          timer = setTimeout(() => resolve(`still running 10 s after an abort ${what} into its start`), 10_000)
        })
        const ended = exec.then(
          () => "resolved",
          (error: unknown) => error,
        )
        const outcome = await Promise.race([ended, missed])
        clearTimeout(timer)
        expect(outcome).toBe(reason)
      }
    }, 120_000)

    it("rejects at once when the signal is already aborted", async () => {
      const { run } = await openRun()
      const reason = new Error("stopped before it started")
      await expect(run.exec(shell("echo never"), collect(), AbortSignal.abort(reason))).rejects.toBe(reason)
    })

    it("rejects with a SystemError naming a missing executable", async () => {
      const { run } = await openRun()
      const task = shell("", { command: { path: "runnel-no-such-executable", args: ["x"] } })
      const exec = run.exec(task, collect(), never)
      await expect(exec).rejects.toBeInstanceOf(SystemError)
      await expect(exec).rejects.toThrow(/runnel-no-such-executable/)
    })

    it("keeps the volumes of two runs apart, even with the same name", async () => {
      const { run: first } = await openRun()
      const { run: second } = await openRun()
      const task = (script: string, volume: { name: string }) =>
        shell(script, { mounts: { "/shared": volume }, workDir: "/shared" })
      await first.exec(task("echo secret > mine.txt", await first.createVolume("shared")), collect(), never)
      const output = collect()
      const exit = await second.exec(task("ls", await second.createVolume("shared")), output, never)
      expect(exit.code).toBe(0)
      expect(output.out()).toBe("")
    })

    it("rejects a task that mounts a volume its run did not create", async () => {
      const { run } = await openRun()
      const task = shell("true", { mounts: { "/elsewhere": { name: "never-created" } } })
      await expect(run.exec(task, collect(), never)).rejects.toThrow(SystemError)
    })

    it("removes everything of the run on close, and closes twice without complaint", async () => {
      const { run, runId } = await openRun()
      const cache = await run.createVolume("cache")
      await run.exec(shell("echo x > file", { mounts: { "/cache": cache }, workDir: "/cache" }), collect(), never)
      await run.close()
      await run.close()
      if (options.remains !== undefined) expect(await options.remains(runId)).toEqual([])
    })

    it("closes a run in which nothing ran", async () => {
      const { run } = await openRun()
      await run.close()
    })

    it("keeps a cache through close() and removeLeftovers(), for a later run with the same key", async () => {
      const key = cacheKey()
      const { driver, run: first } = await openRun()
      const written = await first.exec(
        inVolume("echo kept > cached.txt", await first.createVolume(key, { cache: true })),
        collect(),
        never,
      )
      expect(written).toEqual({ code: 0, timedOut: false })
      await first.close()
      await driver.removeLeftovers()
      const { run: second } = await openRun()
      const output = collect()
      await second.exec(inVolume("cat cached.txt", await second.createVolume(key, { cache: true })), output, never)
      expect(output.out()).toBe("kept\n")
    })

    it("removes a run's own volumes on close, so a rerun with the same id starts empty", async () => {
      const { run: first, runId } = await openRun()
      await first.exec(inVolume("echo gone > work.txt", await first.createVolume("work")), collect(), never)
      await first.close()
      const { run: second } = await openRun(runId)
      const output = collect()
      expect(await second.exec(inVolume("ls", await second.createVolume("work")), output, never)).toEqual({
        code: 0,
        timedOut: false,
      })
      expect(output.out()).toBe("")
    })

    it("shares one cache between runs open at the same time, and one closing leaves it to the other", async () => {
      const key = cacheKey()
      const { run: first } = await openRun()
      const { run: second } = await openRun()
      const [mine, theirs] = [
        await first.createVolume(key, { cache: true }),
        await second.createVolume(key, { cache: true }),
      ]
      await first.exec(inVolume("echo from-first > shared.txt", mine), collect(), never)
      await first.close()
      const output = collect()
      await second.exec(inVolume("cat shared.txt", theirs), output, never)
      expect(output.out()).toBe("from-first\n")
    })

    it("accepts a cache key of 200 characters", async () => {
      const key = cacheKey(200)
      const { run } = await openRun()
      const output = collect()
      await run.exec(
        inVolume("echo ok > ok.txt; cat ok.txt", await run.createVolume(key, { cache: true })),
        output,
        never,
      )
      expect(output.out()).toBe("ok\n")
    })

    it("rejects a cache key that is not lowercase letters, digits, '-', '.' and '_', or is over 200 characters", async () => {
      const { run } = await openRun()
      const invalid = [
        "",
        "Upper",
        "with space",
        "a/b",
        "../up",
        ".hidden",
        "-first",
        "caf\u00e9",
        "k:v",
        "x".repeat(201),
      ]
      for (const key of invalid) {
        const created = run.createVolume(key, { cache: true })
        await expect(created, key).rejects.toBeInstanceOf(SystemError)
        await expect(created, key).rejects.toThrow(
          /^cache key .+ (is not allowed: use lowercase letters|characters long)/,
        )
      }
    })

    it("rejects a name asked for as both a volume and a cache in one run", async () => {
      const key = cacheKey()
      const { run } = await openRun()
      await run.createVolume(key, { cache: true })
      await expect(run.createVolume(key)).rejects.toThrow(
        `"${key}" was requested as a volume, but this run already made it a cache`,
      )
      await run.createVolume("plain")
      await expect(run.createVolume("plain", { cache: true })).rejects.toThrow(SystemError)
    })
  })
}

/** A TaskOutput that keeps everything, for tests with small outputs; `out()` and `err()` read it back. */
export function collect(): TaskOutput & { out(): string; err(): string } {
  const out: Buffer[] = []
  const err: Buffer[] = []
  return {
    stdout: (chunk) => void out.push(chunk),
    stderr: (chunk) => void err.push(chunk),
    out: () => Buffer.concat(out).toString(),
    err: () => Buffer.concat(err).toString(),
  }
}

/** Resolves once `done()` holds, polling; fails the test after `timeoutMs`. */
export async function until(done: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = performance.now() + timeoutMs
  while (!done()) {
    if (performance.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}
