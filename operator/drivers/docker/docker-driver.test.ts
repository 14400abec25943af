import { spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { hostname } from "node:os"
import Docker from "dockerode"
import { describe, expect, it, onTestFinished } from "vitest"
import { SystemError } from "../../../lib/core/errors.ts"
import { describeDocker, dockerHost } from "../../../test/docker.ts"
import type { TaskSpec } from "../driver.ts"
import { collect, driverContract, until } from "../driver-contract.fixture.ts"
import { dockerDriverFactory, dockerLabels } from "./docker-driver.ts"

const factory = dockerDriverFactory({ host: dockerHost })
const never = new AbortController().signal

function client(): Docker {
  const host = dockerHost ?? "/var/run/docker.sock"
  if (host.startsWith("/") || host.startsWith("unix://"))
    return new Docker({ socketPath: host.replace(/^unix:\/\//, "") })
  const url = new URL(host.replace(/^tcp:/, "http:"))
  return new Docker({ host: url.hostname, port: url.port, protocol: "http" })
}

/** Names of the containers and volumes carrying the run's label. */
async function remains(runId: string): Promise<string[]> {
  const docker = client()
  const filters = { label: [`${dockerLabels.run}=${runId}`] }
  const [containers, volumes] = await Promise.all([
    docker.listContainers({ all: true, filters }),
    docker.listVolumes({ filters }),
  ])
  return [...containers.map((container) => container.Id), ...(volumes.Volumes ?? []).map((volume) => volume.Name)]
}

async function removeCache(key: string): Promise<void> {
  await client()
    .getVolume(`runnel-cache-${key}`)
    .remove({ force: true })
    .catch((error: { statusCode?: number }) => {
      if (error.statusCode !== 404) throw error
    })
}

function shell(script: string, more: Partial<TaskSpec> = {}): TaskSpec {
  return {
    path: "tasks/1/docker",
    name: "docker",
    image: "busybox",
    command: { path: "sh", args: ["-c", script] },
    env: {},
    mounts: {},
    ...more,
  }
}

async function openRun(driver = factory.create({})) {
  const runId = `docker-test-${randomBytes(4).toString("hex")}`
  const run = await driver.open(runId)
  onTestFinished(async () => {
    await run.close()
    await driver.close()
  })
  return { run, runId }
}

describeDocker("docker", () => {
  driverContract("docker", () => factory.create({}), { remains, removeCache })

  describe("docker driver", () => {
    it("labels its containers and volumes with the run, the task and the owning process", async () => {
      const { run, runId } = await openRun()
      const volume = await run.createVolume("labelled")
      const output = collect()
      const controller = new AbortController()
      const task = shell("echo started; sleep 30", { path: "tasks/7/label", mounts: { "/data": volume } })
      const exec = run.exec(task, output, controller.signal)
      onTestFinished(() => controller.abort(new Error("test over")))
      await until(() => output.out() !== "")
      const docker = client()
      const [container] = await docker.listContainers({
        all: true,
        filters: { label: [`${dockerLabels.run}=${runId}`] },
      })
      const owner = `${hostname()}:${process.pid}`
      expect(container?.Labels).toMatchObject({
        [dockerLabels.run]: runId,
        [dockerLabels.task]: "tasks/7/label",
        [dockerLabels.owner]: owner,
      })
      const details = await docker.getContainer(container?.Id ?? "").inspect()
      expect(details.HostConfig.LogConfig?.Type).toBe("none")
      const [dockerVolume] = (await docker.listVolumes({ filters: { label: [`${dockerLabels.run}=${runId}`] } }))
        .Volumes
      expect(dockerVolume?.Name).toBe(`runnel-${runId}-labelled`)
      expect(dockerVolume?.Labels).toMatchObject({ [dockerLabels.run]: runId, [dockerLabels.owner]: owner })
      controller.abort(new Error("seen enough"))
      await expect(exec).rejects.toThrow("seen enough")
    })

    it("names a cache volume after its key and labels it with the key alone, not the run or the owner", async () => {
      const key = `docker-test-${randomBytes(4).toString("hex")}`
      onTestFinished(() => removeCache(key))
      const { run, runId } = await openRun()
      await run.createVolume(key, { cache: true })
      const volumes = (await client().listVolumes({ filters: { label: [`${dockerLabels.cache}=${key}`] } })).Volumes
      expect(volumes?.map((volume) => [volume.Name, volume.Labels])).toEqual([
        [`runnel-cache-${key}`, { [dockerLabels.cache]: key }],
      ])
      expect(await remains(runId)).toEqual([])
    })

    it("removes the task's container once it has ended, and an aborted one at once", async () => {
      const { run, runId } = await openRun()
      await run.exec(shell("true"), collect(), never)
      expect(await remains(runId)).toEqual([])
      const controller = new AbortController()
      const output = collect()
      const exec = run.exec(shell("echo started; sleep 30"), output, controller.signal)
      await until(() => output.out() !== "")
      controller.abort(new Error("stop"))
      await expect(exec).rejects.toThrow("stop")
      expect(await remains(runId)).toEqual([])
    })

    it("gives the container the task's memory, cpu quota and cpu shares", async () => {
      const { run, runId } = await openRun()
      const output = collect()
      const controller = new AbortController()
      onTestFinished(() => controller.abort(new Error("test over")))
      const resources = { memoryBytes: 32 * 1024 * 1024, cpuMillis: 500, cpuShares: 512 }
      const exec = run.exec(shell("echo up; sleep 30", { resources }), output, controller.signal)
      await until(() => output.out() !== "", 30_000)
      const containers = await client().listContainers({
        all: true,
        filters: { label: [`${dockerLabels.run}=${runId}`] },
      })
      expect(containers).toHaveLength(1)
      const { HostConfig } = await client()
        .getContainer(containers[0]?.Id ?? "none")
        .inspect()
      expect(HostConfig).toMatchObject({
        Memory: 33554432,
        MemorySwap: 33554432,
        NanoCpus: 500_000_000,
        CpuShares: 512,
        Privileged: false,
      })
      controller.abort(new Error("seen enough"))
      await expect(exec).rejects.toThrow("seen enough")
    })

    it("reports 137 for a task killed by its timeout", async () => {
      const { run } = await openRun()
      expect(await run.exec(shell("sleep 30", { timeoutMs: 300 }), collect(), never)).toEqual({
        code: 137,
        timedOut: true,
      })
    })

    it("runs the command itself, not through the image's entrypoint", async () => {
      const { run } = await openRun()
      const output = collect()
      await run.exec({ ...shell(""), command: { path: "echo", args: ["plain", "args"] } }, output, never)
      expect(output.out()).toBe("plain args\n")
    })

    it("fails within seconds with an actionable message when an image cannot be pulled", async () => {
      const { run } = await openRun()
      const output = collect()
      const started = performance.now()
      const exec = run.exec(shell("true", { image: "runnel-test/no-such-image:1" }), output, never)
      await expect(exec).rejects.toBeInstanceOf(SystemError)
      await expect(exec).rejects.toThrow(
        /^image "runnel-test\/no-such-image:1" could not be pulled: .+; is the name right, and can the Docker daemon reach its registry\?$/,
      )
      expect(performance.now() - started).toBeLessThan(15_000)
      expect(output.err()).toContain('pulling image "runnel-test/no-such-image:1"')
    })

    it("removes the containers and volumes of dead owners, and leaves a live owner's alone", async () => {
      const docker = client()
      const dead = `${hostname()}:${await deadPid()}`
      const live = `${hostname()}:${process.pid}`
      const made = async (owner: string) => {
        const runId = `leftover-${randomBytes(4).toString("hex")}`
        const labels = { [dockerLabels.run]: runId, [dockerLabels.owner]: owner }
        await docker.createContainer({ Image: "busybox", Cmd: ["true"], Labels: labels })
        await docker.createVolume({ Name: `runnel-${runId}-v`, Labels: labels })
        return runId
      }
      const [deadRun, liveRun] = await Promise.all([made(dead), made(live)])
      onTestFinished(async () => {
        for (const id of await remains(liveRun)) {
          await (id.startsWith("runnel-") ? docker.getVolume(id) : docker.getContainer(id)).remove({ force: true })
        }
      })
      const driver = factory.create({})
      onTestFinished(() => driver.close())
      await driver.removeLeftovers()
      expect(await remains(deadRun)).toEqual([])
      expect(await remains(liveRun)).toHaveLength(2)
    })
  })
})

describe("docker driver without a daemon", () => {
  it("says which socket does not answer and what to do", async () => {
    const driver = dockerDriverFactory({}).create({ host: "/tmp/runnel-no-such-docker.sock" })
    const run = await driver.open("unreachable")
    onTestFinished(() => driver.close())
    await expect(run.exec(shell("true"), collect(), never)).rejects.toThrow(
      "cannot reach the Docker daemon at /tmp/runnel-no-such-docker.sock (ENOENT); start Docker, or run with --driver native",
    )
    await run.close()
  })

  it("prefers the pipeline's host over the default one", async () => {
    const driver = dockerDriverFactory({ host: "unix:///tmp/runnel-default.sock" }).create({
      host: "tcp://127.0.0.1:1",
    })
    const run = await driver.open("unreachable")
    onTestFinished(() => driver.close())
    await expect(run.createVolume("v")).rejects.toThrow(
      "cannot reach the Docker daemon at tcp://127.0.0.1:1 (ECONNREFUSED); start Docker, or run with --driver native",
    )
  })

  it("uses the default host when the pipeline names none", async () => {
    const driver = dockerDriverFactory({ host: "unix:///tmp/runnel-default.sock" }).create({})
    const run = await driver.open("unreachable")
    onTestFinished(() => driver.close())
    await expect(run.createVolume("v")).rejects.toThrow("at unix:///tmp/runnel-default.sock (ENOENT)")
  })

  it("rejects a host it does not understand", () => {
    expect(() => dockerDriverFactory({}).create({ host: "ssh://me@box" })).toThrow(
      expect.objectContaining({ status: 400, message: expect.stringContaining('Docker host "ssh://me@box"') }),
    )
    expect(() => dockerDriverFactory({}).create({ host: 2375 })).toThrow(expect.objectContaining({ status: 400 }))
  })
})

/** The pid of a process that has exited. */
async function deadPid(): Promise<number> {
  const child = spawn("true")
  await new Promise((resolve) => child.once("exit", resolve))
  return child.pid ?? 0
}
