import { spawn } from "node:child_process"
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises"
import { hostname, tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it, onTestFinished } from "vitest"
import { SystemError } from "../../../lib/core/errors.ts"
import type { TaskSpec } from "../driver.ts"
import { collect, driverContract } from "../driver-contract.fixture.ts"
import { nativeDriverFactory } from "./native-driver.ts"
import { groupRecord } from "./process-group.ts"

const workRoot = await mkdtemp(join(tmpdir(), "runnel-native-test-"))
afterAll(() => rm(workRoot, { recursive: true, force: true }))

const path = process.env.PATH ?? "/usr/bin:/bin"
const factory = nativeDriverFactory({ workRoot, path })

driverContract("native", () => factory.create({}), {
  remains: async (runId) => (await readdir(workRoot)).filter((entry) => entry.startsWith(`${runId}-`)),
  removeCache: (key) => rm(join(workRoot, "caches", key), { recursive: true, force: true }),
  enforcesResources: false,
  runsPrivileged: false,
})

const never = new AbortController().signal

async function openRun(runId = "native-test") {
  const driver = factory.create({})
  const run = await driver.open(runId)
  onTestFinished(async () => {
    await run.close()
    await driver.close()
  })
  return { driver, run }
}

function shell(script: string, more: Partial<TaskSpec> = {}): TaskSpec {
  return {
    path: "tasks/1/native",
    name: "native",
    image: "ignored",
    command: { path: "sh", args: ["-c", script] },
    env: {},
    mounts: {},
    ...more,
  }
}

/**
 * Whether `pid` is still a live process 2 s after its group was killed: SIGKILL lands
 * asynchronously, so one look right after the kill can still see it. A zombie nobody
 * reaps (PID 1 here may not) has already died.
 */
async function running(pid: number): Promise<boolean> {
  const alive = async () => {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => undefined)
    return stat !== undefined && stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z"
  }
  const deadline = performance.now() + 2000
  while (await alive()) {
    if (performance.now() > deadline) return true
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  return false
}

/** The pid of a process that has exited. */
async function deadPid(): Promise<number> {
  const child = spawn("true")
  await new Promise((resolve) => child.once("exit", resolve))
  return child.pid ?? 0
}

/** A run directory, with its `groups` directory, whose owner has died. */
async function deadOwnersRunDir(name: string): Promise<string> {
  const dir = join(workRoot, name)
  await mkdir(join(dir, "groups"), { recursive: true })
  await writeFile(join(dir, "owner"), `${hostname()}:${await deadPid()}`)
  return dir
}

/** A process group of its own, as a task's, with a process in the background: both pids. */
async function orphanGroup(): Promise<{ leader: number; background: number }> {
  const child = spawn("sh", ["-c", "sleep 100 & echo $!; sleep 100"], {
    detached: true,
    stdio: ["ignore", "pipe", "ignore"],
  })
  const background = await new Promise<number>((resolve) =>
    child.stdout.once("data", (chunk) => resolve(Number(String(chunk).trim()))),
  )
  return { leader: child.pid ?? 0, background }
}

describe("native driver", () => {
  it("kills the whole process group when a task times out", async () => {
    const { run } = await openRun()
    const output = collect()
    const exit = await run.exec(shell("sleep 100 & echo $!; sleep 100", { timeoutMs: 300 }), output, never)
    expect(exit).toEqual({ code: 137, timedOut: true })
    expect(await running(Number(output.out().trim()))).toBe(false)
  })

  it("kills the whole process group when a task is aborted", async () => {
    const { run } = await openRun()
    const output = collect()
    const controller = new AbortController()
    const exec = run.exec(shell("sleep 100 & echo $!; sleep 100"), output, controller.signal)
    while (output.out() === "") await new Promise((resolve) => setTimeout(resolve, 10))
    controller.abort(new Error("stopped"))
    await expect(exec).rejects.toThrow("stopped")
    expect(await running(Number(output.out().trim()))).toBe(false)
  })

  it("ends a task with its main process, killing what it left in the background", async () => {
    const { run } = await openRun()
    const output = collect()
    const started = performance.now()
    expect(await run.exec(shell("sleep 100 & echo $!"), output, never)).toEqual({ code: 0, timedOut: false })
    expect(performance.now() - started).toBeLessThan(5000)
    expect(await running(Number(output.out().trim()))).toBe(false)
  })

  it("gives a task exactly its env plus PATH, and HOME set to the run directory", async () => {
    const { run } = await openRun("env-run")
    const output = collect()
    await run.exec({ ...shell(""), command: { path: "env", args: [] }, env: { ONLY: "this" } }, output, never)
    const env = Object.fromEntries(
      output
        .out()
        .trim()
        .split("\n")
        .map((line) => line.split(/=(.*)/s).slice(0, 2)),
    )
    expect(Object.keys(env).sort()).toEqual(["HOME", "ONLY", "PATH"])
    expect(env).toMatchObject({ ONLY: "this", PATH: path })
    expect(env.HOME).toMatch(new RegExp(`^${workRoot}/env-run-[0-9a-f]+$`))
  })

  it("lets the task's own PATH win", async () => {
    const { run } = await openRun()
    const output = collect()
    await run.exec(shell('echo "$PATH"', { env: { PATH: `/opt/tools:${path}` } }), output, never)
    expect(output.out()).toBe(`/opt/tools:${path}\n`)
  })

  it("runs each task in a root of its own, below its workDir, and removes the root when the task ends", async () => {
    const { run } = await openRun("cwd-run")
    const top = collect()
    await run.exec(shell("pwd; echo scratch > note", { name: "first" }), top, never)
    expect(top.out()).toMatch(new RegExp(`^${workRoot}/cwd-run-[0-9a-f]+/tasks/1-first\\n$`))
    const deep = collect()
    await run.exec(shell("pwd; ls ../..", { name: "second", workDir: "/src/app/" }), deep, never)
    expect(deep.out()).toBe(
      `${top
        .out()
        .trim()
        .replace(/1-first$/, "2-second")}/src/app\nsrc\n`,
    )
    const runDir = top
      .out()
      .trim()
      .replace(/\/tasks\/1-first$/, "")
    expect(await readdir(join(runDir, "tasks"))).toEqual([])
  })

  it("links each mount into the task's root, so a workDir beside a mount reaches it by a relative path", async () => {
    const { run } = await openRun()
    const input = await run.createVolume("in")
    await run.exec(shell("echo shared > file", { mounts: { "/in": input }, workDir: "/in" }), collect(), never)
    const output = collect()
    const task = shell("cat ../in/file; ls ..", { mounts: { "/build/in": input }, workDir: "/build/src" })
    expect(await run.exec(task, output, never)).toEqual({ code: 0, timedOut: false })
    expect(output.out()).toBe("shared\nin\nsrc\n")
  })

  it("refuses a mount inside another mount where no mount namespace can be made, naming both, writing nothing", async () => {
    const driver = nativeDriverFactory({ workRoot, path, unshare: "/nonexistent/unshare" }).create({})
    const run = await driver.open("no-namespace-nested")
    onTestFinished(() => run.close())
    const [outer, inner] = [await run.createVolume("outer"), await run.createVolume("inner")]
    const task = shell("true", { mounts: { "/a": outer, "/a/b/": inner }, workDir: "/a" })
    const exec = run.exec(task, collect(), never)
    await expect(exec).rejects.toBeInstanceOf(SystemError)
    await expect(exec).rejects.toThrow(
      'task "tasks/1/native" mounts "/a/b" inside "/a", which the native driver can do only in a private mount namespace and not inside a mount at "/" (this machine refuses one: /nonexistent/unshare: spawn /nonexistent/unshare ENOENT); mount them side by side, or run with --driver docker',
    )
    const output = collect()
    await run.exec(shell("ls", { mounts: { "/a": outer }, workDir: "/a" }), output, never)
    expect(output.out()).toBe("")
  })

  // testflight/fixtures/volume-mounting.yml: an input inside an output, an output inside an input.
  it("nests a mount inside another in a mount namespace, the outer volume getting only its mount point", async () => {
    const { run } = await openRun()
    const [outer, inner] = [await run.createVolume("nest-outer"), await run.createVolume("nest-inner")]
    const write = collect()
    const task = shell("echo in > out/in/file && echo top > out/top && ls out", {
      mounts: { "/tmp/build/w/out": outer, "/tmp/build/w/out/in": inner },
      workDir: "/tmp/build/w",
    })
    expect(await run.exec(task, write, never)).toEqual({ code: 0, timedOut: false })
    expect(write.out()).toBe("in\ntop\n")
    const outerSeen = collect()
    await run.exec(shell("ls; cat top; ls in", { mounts: { "/o": outer }, workDir: "/o" }), outerSeen, never)
    expect(outerSeen.out()).toBe("in\ntop\ntop\n")
    const innerSeen = collect()
    await run.exec(shell("cat file", { mounts: { "/i": inner }, workDir: "/i" }), innerSeen, never)
    expect(innerSeen.out()).toBe("in\n")
  })

  it("writes an absolute path on the host, as it is: only the working directory is mapped", async () => {
    const { run } = await openRun()
    const target = join(workRoot, "absolute.txt")
    onTestFinished(() => rm(target, { force: true }))
    await run.exec(shell(`echo host > ${target}`, { workDir: "/anywhere" }), collect(), never)
    expect(await readFile(target, "utf8")).toBe("host\n")
  })

  // Issue 19, group 9: a script task mounting a volume at /data writes /data/file.txt.
  it("binds each volume at its absolute path in a mount namespace of the task's own, seen by no one else", async () => {
    const { run } = await openRun()
    const data = await run.createVolume("data")
    const write = collect()
    const task = shell("echo from-task > /data/file.txt && cat /data/file.txt && ls data", {
      mounts: { "/data": data },
    })
    expect(await run.exec(task, write, never)).toEqual({ code: 0, timedOut: false })
    expect(write.out()).toBe("from-task\nfile.txt\n")
    const read = collect()
    await run.exec(shell("cat file.txt; test ! -e /data", { mounts: { "/in": data }, workDir: "/in" }), read, never)
    expect(read.out()).toBe("from-task\n")
    await expect(readFile("/data/file.txt", "utf8")).rejects.toMatchObject({ code: "ENOENT" })
  })

  it("binds a volume below a host directory that sorts before the one holding the task roots", async () => {
    // /srv exists on the host and is bound into the new root before /tmp, whose copy of the new
    // root then held /srv as a mount point: the namespace could not replace it.
    const { run } = await openRun()
    const data = await run.createVolume("srv-in")
    const output = collect()
    const task = shell("echo bound > /srv/runnel-in/file && cat /srv/runnel-in/file", {
      mounts: { "/srv/runnel-in": data },
    })
    expect(await run.exec(task, output, never)).toEqual({ code: 0, timedOut: false })
    expect(output.out()).toBe("bound\n")
    await expect(readFile("/srv/runnel-in/file", "utf8")).rejects.toMatchObject({ code: "ENOENT" })
  })

  it("refuses a mount outside the working directory where no mount namespace can be made, saying to use docker", async () => {
    const driver = nativeDriverFactory({ workRoot, path, unshare: "/nonexistent/unshare" }).create({})
    const run = await driver.open("no-namespace")
    onTestFinished(() => run.close())
    const data = await run.createVolume("data")
    const exec = run.exec(
      shell("echo x > /data/file.txt", { mounts: { "/data": data }, workDir: "/work" }),
      collect(),
      never,
    )
    await expect(exec).rejects.toBeInstanceOf(SystemError)
    await expect(exec).rejects.toThrow(
      'task "tasks/1/native" mounts "/data" outside its working directory "/work": the native driver places such a mount only in a private mount namespace, which this machine refuses (/nonexistent/unshare: spawn /nonexistent/unshare ENOENT); mount it below the working directory, or run with --driver docker',
    )
    // Mounts below the working directory still work, through the links, as before.
    const output = collect()
    await run.exec(
      shell("echo ok > data/f && cat data/f", { mounts: { "/work/data": data }, workDir: "/work" }),
      output,
      never,
    )
    expect(output.out()).toBe("ok\n")
  })

  it("names a missing executable in a namespaced task as in any other", async () => {
    const { run } = await openRun()
    const data = await run.createVolume("data")
    const task = { ...shell(""), command: { path: "no-such-program-runnel", args: [] }, mounts: { "/data": data } }
    await expect(run.exec(task, collect(), never)).rejects.toThrow(
      'executable "no-such-program-runnel" not found on PATH',
    )
  })

  it("runs a workDir below a mount inside that volume's directory", async () => {
    const { run } = await openRun()
    const volume = await run.createVolume("cache")
    const mounts = { "/cache": volume }
    await run.exec(shell("echo deep > file", { mounts, workDir: "/cache/a/b" }), collect(), never)
    const output = collect()
    await run.exec(shell("cat a/b/file", { mounts, workDir: "/cache" }), output, never)
    expect(output.out()).toBe("deep\n")
  })

  it("names a missing executable and the PATH searched", async () => {
    const { run } = await openRun()
    const exec = run.exec({ ...shell(""), command: { path: "runnel-nope", args: [] } }, collect(), never)
    await expect(exec).rejects.toBeInstanceOf(SystemError)
    await expect(exec).rejects.toThrow(`executable "runnel-nope" not found on PATH ${path}`)
  })

  it("kills running tasks and removes the run directory on close", async () => {
    const driver = factory.create({})
    const run = await driver.open("close-run")
    const output = collect()
    const exec = run.exec(shell("echo $$; sleep 100"), output, never)
    while (output.out() === "") await new Promise((resolve) => setTimeout(resolve, 10))
    await run.close()
    expect((await exec).code).toBe(137)
    expect(await running(Number(output.out().trim()))).toBe(false)
    expect((await readdir(workRoot)).filter((entry) => entry.startsWith("close-run-"))).toEqual([])
  })

  it("removes the run directories of dead owners and keeps those of live ones", async () => {
    const dead = join(workRoot, "crashed-run-00000000")
    const live = join(workRoot, "live-run-00000000")
    const unowned = join(workRoot, "unowned")
    await Promise.all([mkdir(dead), mkdir(live), mkdir(unowned)])
    await writeFile(join(dead, "owner"), `${hostname()}:${await deadPid()}`)
    await writeFile(join(live, "owner"), `${hostname()}:${process.pid}`)
    onTestFinished(async () => {
      await Promise.all([live, unowned].map((dir) => rm(dir, { recursive: true, force: true })))
    })
    await factory.create({}).removeLeftovers()
    const entries = await readdir(workRoot)
    expect(entries).not.toContain("crashed-run-00000000")
    expect(entries).toEqual(expect.arrayContaining(["live-run-00000000", "unowned"]))
  })

  it("kills the process groups a dead owner's tasks left running before removing its run directory", async () => {
    const dead = await deadOwnersRunDir("killed-owner-00000000")
    const { leader, background } = await orphanGroup()
    await writeFile(join(dead, "groups", String(leader)), groupRecord(leader))
    await factory.create({}).removeLeftovers()
    expect(await running(leader)).toBe(false)
    expect(await running(background)).toBe(false)
    expect(await readdir(workRoot)).not.toContain("killed-owner-00000000")
  })

  it("kills what is left of a recorded group whose leader has ended", async () => {
    const dead = await deadOwnersRunDir("leaderless-owner-00000000")
    const leader = spawn("sh", ["-c", "sleep 100 & echo $!"], { detached: true, stdio: ["ignore", "pipe", "ignore"] })
    const exited = new Promise((resolve) => leader.once("exit", resolve))
    const printed = new Promise<number>((resolve) =>
      leader.stdout.once("data", (chunk) => resolve(Number(String(chunk).trim()))),
    )
    // Recorded as the driver does: at once, while the leader cannot have been reaped yet.
    const record = groupRecord(leader.pid ?? 0)
    await writeFile(join(dead, "groups", String(leader.pid)), record)
    const background = await printed
    await exited
    expect(await readFile(`/proc/${background}/stat`, "utf8")).toMatch(/\) [^Z] /)
    await factory.create({}).removeLeftovers()
    expect(await running(background)).toBe(false)
    expect(await readdir(workRoot)).not.toContain("leaderless-owner-00000000")
  })

  it("leaves alone a recorded group whose leader started at another time: its pid was recycled", async () => {
    const dead = await deadOwnersRunDir("recycled-owner-00000000")
    const { leader, background } = await orphanGroup()
    onTestFinished(() => {
      process.kill(-leader, "SIGKILL")
    })
    const [boot, started] = groupRecord(leader).split(" ")
    await writeFile(join(dead, "groups", String(leader)), `${boot} ${Number(started) - 1}`)
    await factory.create({}).removeLeftovers()
    expect(await readFile(`/proc/${background}/stat`, "utf8")).toMatch(/\) [^Z] /)
    expect(await readdir(workRoot)).not.toContain("recycled-owner-00000000")
  })

  it("keeps a cache in <workRoot>/caches/<key>, and removes leftovers even with a cache named like the owner file", async () => {
    const { run } = await openRun()
    onTestFinished(() => rm(join(workRoot, "caches", "owner"), { recursive: true, force: true }))
    const cache = await run.createVolume("owner", { cache: true })
    await run.exec(shell("echo kept > file", { mounts: { "/c": cache }, workDir: "/c" }), collect(), never)
    await factory.create({}).removeLeftovers()
    await run.close()
    expect(await readFile(join(workRoot, "caches", "owner", "file"), "utf8")).toBe("kept\n")
  })

  it("finds no leftovers when the work root does not exist yet", async () => {
    const driver = nativeDriverFactory({ workRoot: join(workRoot, "missing"), path }).create({})
    await driver.removeLeftovers()
  })
})
