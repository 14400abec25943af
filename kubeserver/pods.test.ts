import { execFile, execFileSync, spawn } from "node:child_process"
import { join } from "node:path"
import { promisify } from "node:util"
import { CoreV1Api, type V1Pod } from "@kubernetes/client-node"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { refusal } from "../lib/kube/kube-api-contract.fixture.ts"
import { describeDocker, dockerHost } from "../test/docker.ts"
import type { RunningApi } from "./embedded-api.fixture.ts"
import { requestAfterClientLeft, startEmbeddedApi } from "./embedded-api.fixture.ts"

// What only the embedded API's node lets a test drive; the Pod semantics a cluster shares are in
// ../lib/kube/kube-api-contract.fixture.ts (kubePodContract).

const namespace = "default"
const pod = (name: string, script: string): V1Pod => ({
  metadata: { name, labels: { suite: "pods" } },
  spec: { restartPolicy: "Never", containers: [{ name: "main", image: "busybox", command: ["sh", "-c", script] }] },
})

async function podWhen(core: CoreV1Api, name: string, check: (found: V1Pod) => boolean): Promise<V1Pod> {
  const deadline = Date.now() + 60_000
  for (;;) {
    const found = await core.readNamespacedPod({ namespace, name })
    if (check(found)) return found
    if (Date.now() > deadline) throw new Error(`pod ${name} never got there: ${JSON.stringify(found.status)}`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

describe("a Pod on an embedded API without a Docker daemon", () => {
  let running: RunningApi
  beforeAll(async () => {
    running = await startEmbeddedApi({ dockerHost: join(import.meta.dirname, "no-such-docker.sock") })
  })
  afterAll(() => running?.close())

  it("stays Pending with PodScheduled False, reason Unschedulable, naming the daemon", async () => {
    const core = running.kubeConfig.makeApiClient(CoreV1Api)
    const created = await core.createNamespacedPod({ namespace, body: pod("waits", "true") })
    expect(created.status?.phase).toBe("Pending")
    const waiting = await podWhen(core, "waits", (found) => (found.status?.conditions ?? []).length > 0)
    expect(waiting.status?.phase).toBe("Pending")
    expect(waiting.spec?.nodeName).toBeUndefined()
    const [condition] = waiting.status?.conditions ?? []
    expect(condition).toMatchObject({ type: "PodScheduled", status: "False", reason: "Unschedulable" })
    expect(condition?.message).toContain("no-such-docker.sock")
    const logs = await refusal(core.readNamespacedPodLog({ namespace, name: "waits" }))
    expect(logs.code).toBe(400)
    expect(logs.status.message).toBe('container "main" in pod "waits" is waiting to start: ContainerCreating')
    await core.deleteNamespacedPod({ namespace, name: "waits" })
    expect((await refusal(core.readNamespacedPod({ namespace, name: "waits" }))).code).toBe(404)
  })

  it("refuses a Pod without containers, naming the field", async () => {
    const core = running.kubeConfig.makeApiClient(CoreV1Api)
    const { code, status } = await refusal(
      core.createNamespacedPod({ namespace, body: { metadata: { name: "empty" }, spec: { containers: [] } } }),
    )
    expect(code).toBe(422)
    expect(status.message).toContain("spec.containers")
  })
})

async function hostConfig(id: string): Promise<Record<string, unknown>> {
  const env = { ...process.env, ...(dockerHost === undefined ? {} : { DOCKER_HOST: dockerHost }) }
  const { stdout } = await promisify(execFile)("docker", ["inspect", "--format", "{{json .HostConfig}}", id], { env })
  return JSON.parse(stdout)
}

const kubectlFound = (() => {
  try {
    execFileSync("kubectl", ["version", "--client"], { stdio: "ignore" })
    return true
  } catch {
    return false
  }
})()

describeDocker("Pods of the embedded API in Docker", () => {
  let running: RunningApi
  let core: CoreV1Api
  beforeAll(async () => {
    running = await startEmbeddedApi({ dockerHost })
    core = running.kubeConfig.makeApiClient(CoreV1Api)
  })
  afterAll(() => running?.close())

  const kubectl = (...args: string[]) =>
    new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      const env = { ...process.env, KUBECONFIG: join(running.dir, "none"), HOME: running.dir }
      execFile("kubectl", ["--server", running.server, ...args], { env, timeout: 60_000 }, (error, stdout, stderr) =>
        resolve({ code: error === null ? 0 : Number(error.code ?? 1), stdout, stderr }),
      )
    })

  it("serves stdout and stderr apart with the stream parameter, and checks the log options", async () => {
    await core.createNamespacedPod({ namespace, body: pod("split", "echo out; echo err >&2") })
    await podWhen(core, "split", (found) => found.status?.phase === "Succeeded")
    const log = (more: object) => core.readNamespacedPodLog({ namespace, name: "split", ...more })
    expect(await log({ stream: "Stdout" })).toBe("out\n")
    expect(await log({ stream: "Stderr" })).toBe("err\n")
    expect((await log({ stream: "All" })).split("\n").sort()).toEqual(["", "err", "out"])
    const both = await refusal(log({ stream: "Stdout", tailLines: 1 }))
    expect(both.code).toBe(422)
    expect(both.status.message).toContain("tailLines")
    expect((await refusal(log({ stream: "Neither" }))).code).toBe(422)
    expect((await refusal(log({ limitBytes: 0 }))).code).toBe(422)
  })

  it("follows no log for a client that left while the container was looked up", async () => {
    await core.createNamespacedPod({ namespace, body: pod("chatty", "while true; do echo tick; sleep 0.1; done") })
    try {
      await podWhen(core, "chatty", (found) => found.status?.containerStatuses?.[0]?.state?.running !== undefined)
      const late = await requestAfterClientLeft(
        running.api,
        `/api/v1/namespaces/${namespace}/pods/chatty/log?follow=true`,
      )
      await new Promise((resolve) => setTimeout(resolve, 500))
      expect(late.written()).toBe(0)
    } finally {
      await core.deleteNamespacedPod({ namespace, name: "chatty", gracePeriodSeconds: 0 })
    }
  })

  it("gives a privileged container its privilege in Docker (which starts it, or says why it cannot)", async () => {
    const body = pod("privileged", "true")
    const container = { ...body.spec?.containers[0], name: "main", securityContext: { privileged: true } }
    await core.createNamespacedPod({ namespace, body: { ...body, spec: { ...body.spec, containers: [container] } } })
    const ended = await podWhen(
      core,
      "privileged",
      (found) => found.status?.phase === "Failed" || found.status?.phase === "Succeeded",
    )
    const terminated = ended.status?.containerStatuses?.[0]?.state?.terminated
    const id = terminated?.containerID?.replace("docker://", "") ?? ""
    expect(await hostConfig(id)).toMatchObject({ Privileged: true })
    await core.deleteNamespacedPod({ namespace, name: "privileged" })
  })

  it.skipIf(!kubectlFound)("works with kubectl: get pods -l, logs -f while it runs, delete pod", async () => {
    await core.createNamespacedPod({
      namespace,
      body: {
        ...pod("ticker", "for i in 1 2 3 4; do echo tick $i; sleep 1; done"),
        metadata: { name: "ticker", labels: { run: "r1" } },
      },
    })
    await podWhen(core, "ticker", (found) => found.status?.containerStatuses?.[0]?.state?.running !== undefined)
    const listed = await kubectl("get", "pods", "-l", "run=r1")
    expect(listed.code).toBe(0)
    expect(listed.stdout).toMatch(/^NAME\s+READY\s+STATUS\s+RESTARTS\s+AGE\nticker\s+1\/1\s+Running\s+0\s+\d+s\n$/)
    // logs -f prints each line as it comes and ends when the container does.
    const follow = spawn("kubectl", ["--server", running.server, "logs", "-f", "ticker"], {
      env: { ...process.env, KUBECONFIG: join(running.dir, "none"), HOME: running.dir },
    })
    const seen: { line: string; at: number }[] = []
    follow.stdout.setEncoding("utf8")
    follow.stdout.on("data", (text: string) => {
      for (const line of text.split("\n").filter(Boolean)) seen.push({ line, at: Date.now() })
    })
    const code = await new Promise((resolve) => follow.on("exit", resolve))
    expect(code).toBe(0)
    expect(seen.map((entry) => entry.line)).toEqual(["tick 1", "tick 2", "tick 3", "tick 4"])
    // Streamed, not printed at the end: the first line came well before the last.
    expect((seen[3]?.at ?? 0) - (seen[0]?.at ?? 0)).toBeGreaterThan(1000)
    // The status follows the container's end, as a kubelet's does.
    await podWhen(core, "ticker", (found) => found.status?.phase === "Succeeded")
    const done = await kubectl("get", "pods", "ticker", "--no-headers")
    expect(done.stdout).toMatch(/^ticker\s+0\/1\s+Completed\s+0\s+/)
    const deleted = await kubectl("delete", "pod", "ticker")
    expect(deleted).toMatchObject({ code: 0, stdout: 'pod "ticker" deleted\n' })
    expect((await kubectl("get", "pods", "-l", "run=r1")).stderr).toBe("No resources found in default namespace.\n")
  })
})
