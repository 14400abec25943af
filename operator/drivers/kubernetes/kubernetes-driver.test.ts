import { execFile } from "node:child_process"
import { hostname } from "node:os"
import { join } from "node:path"
import { promisify } from "node:util"
import { ApiException, CoreV1Api, type V1Pod, type V1PodSpec, Watch } from "@kubernetes/client-node"
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest"
import type { RunningApi } from "../../../kubeserver/embedded-api.fixture.ts"
import { startEmbeddedApi } from "../../../kubeserver/embedded-api.fixture.ts"
import { kubeletLabels } from "../../../kubeserver/kubelet.ts"
import { loadCrds } from "../../../kubeserver/resource-types.ts"
import { DockerHost } from "../../../lib/containers/docker-host.ts"
import { SystemError } from "../../../lib/core/errors.ts"
import { describeDocker, dockerHost } from "../../../test/docker.ts"
import type { TaskSpec } from "../driver.ts"
import { collect, driverContract, until } from "../driver-contract.fixture.ts"
import { cacheClaimName, kubernetesDriverFactory, kubernetesLabels } from "./kubernetes-driver.ts"

const never = new AbortController().signal
const execFileAsync = promisify(execFile)
/** The embedded API's one node is named after the machine. */
const nodeName = hostname().toLowerCase()
const docker = new DockerHost(dockerHost ?? "/var/run/docker.sock", "start Docker")

describeDocker("kubernetes", () => {
  let running: RunningApi
  let core: CoreV1Api
  const namespace = "default"

  beforeAll(async () => {
    running = await startEmbeddedApi({
      crds: loadCrds(join(import.meta.dirname, "..", "..", "..", "crds")),
      dockerHost,
    })
    core = running.kubeConfig.makeApiClient(CoreV1Api)
  })
  afterAll(() => running?.close())

  const factory = () =>
    kubernetesDriverFactory({
      kubeConfig: running.kubeConfig,
      namespace,
      volumeSize: "1Gi",
      accessMode: "ReadWriteOnce",
      unschedulableTimeoutMs: 5_000,
    })

  /** The Pods, Secrets and claims carrying the run's label, and the Docker containers of its Pods. */
  async function remains(runId: string): Promise<string[]> {
    const labelSelector = `${kubernetesLabels.run}=${runId}`
    const [pods, secrets, claims] = await Promise.all([
      core.listNamespacedPod({ namespace, labelSelector }),
      core.listNamespacedSecret({ namespace, labelSelector }),
      core.listNamespacedPersistentVolumeClaim({ namespace, labelSelector }),
    ])
    await running.api.settled()
    const uids = new Set(pods.items.map((pod) => pod.metadata?.uid))
    const containers = (await docker.containers(kubeletLabels.pod)).filter((found) =>
      uids.has(found.labels[kubeletLabels.pod]),
    )
    return [...pods.items, ...secrets.items, ...claims.items]
      .map((object) => `${object.kind ?? ""}/${object.metadata?.name}`)
      .concat(containers.map((found) => found.id))
  }

  async function removeCache(key: string): Promise<void> {
    await core.deleteNamespacedPersistentVolumeClaim({ namespace, name: cacheClaimName(key) }).catch((error) => {
      if (!(error instanceof ApiException && error.code === 404)) throw error
    })
  }

  driverContract("kubernetes", () => factory().create({}), { remains, removeCache })

  function shell(script: string, more: Partial<TaskSpec> = {}): TaskSpec {
    return {
      path: "tasks/1/kube",
      name: "kube",
      image: "busybox",
      command: { path: "sh", args: ["-c", script] },
      env: {},
      mounts: {},
      ...more,
    }
  }

  /**
   * The specs of the Pods created from now on, as the API stored them (spec.nodeName included once
   * bound), in the order they were created: Pods are deleted once their task ends.
   */
  async function podSpecs(): Promise<() => V1PodSpec[]> {
    const specs = new Map<string, V1PodSpec>()
    const watching = await new Watch(running.kubeConfig).watch(
      `/api/v1/namespaces/${namespace}/pods`,
      { resourceVersion: (await core.listNamespacedPod({ namespace })).metadata?.resourceVersion },
      (_type, pod: V1Pod) => {
        const name = pod.metadata?.name ?? ""
        const before = specs.get(name)
        if (pod.spec !== undefined)
          specs.set(name, { ...before, ...pod.spec, nodeName: pod.spec.nodeName ?? before?.nodeName })
      },
      () => {},
    )
    onTestFinished(() => watching.abort())
    return () => [...specs.values()]
  }

  async function hostConfig(id: string): Promise<Record<string, unknown>> {
    const { stdout } = await execFileAsync("docker", ["inspect", "--format", "{{json .HostConfig}}", id], {
      env: { ...process.env, ...(dockerHost === undefined ? {} : { DOCKER_HOST: dockerHost }) },
    })
    return JSON.parse(stdout)
  }

  async function openRun(driver = factory().create({})) {
    const runId = `kube-test-${Math.random().toString(36).slice(2, 8)}`
    const run = await driver.open(runId)
    onTestFinished(async () => {
      await run.close()
      await driver.close()
    })
    return { run, runId }
  }

  describe("kubernetes driver", () => {
    it("puts env values in a Secret the Pod references, never in the Pod, and removes both", async () => {
      const { run, runId } = await openRun()
      const output = collect()
      const controller = new AbortController()
      onTestFinished(() => controller.abort(new Error("test over")))
      const exec = run.exec(
        shell('echo "token=$API_TOKEN"; sleep 30', { env: { API_TOKEN: "hunter2-secret-value" } }),
        output,
        controller.signal,
      )
      await until(() => output.out() !== "", 60_000)
      expect(output.out()).toBe("token=hunter2-secret-value\n")
      const pods = await core.listNamespacedPod({ namespace, labelSelector: `${kubernetesLabels.run}=${runId}` })
      expect(pods.items).toHaveLength(1)
      const [pod] = pods.items
      expect(JSON.stringify(pod)).not.toContain("hunter2-secret-value")
      expect(pod?.spec?.restartPolicy).toBe("Never")
      expect(pod?.metadata?.labels?.[kubernetesLabels.task]).toMatch(/^tasks/)
      expect(pod?.spec?.containers[0]?.env).toEqual([
        { name: "API_TOKEN", valueFrom: { secretKeyRef: { name: pod?.metadata?.name, key: "API_TOKEN" } } },
      ])
      expect(pod?.spec?.containers[0]?.securityContext).toEqual({
        allowPrivilegeEscalation: false,
        capabilities: { drop: ["ALL"] },
        seccompProfile: { type: "RuntimeDefault" },
      })
      controller.abort(new Error("seen enough"))
      await expect(exec).rejects.toThrow("seen enough")
      expect(await remains(runId)).toEqual([])
    })

    it("deletes the Pod and its container when aborted", async () => {
      const { run, runId } = await openRun()
      const output = collect()
      const controller = new AbortController()
      const exec = run.exec(shell("echo started; sleep 60"), output, controller.signal)
      await until(() => output.out() === "started\n", 60_000)
      const [pod] = (await core.listNamespacedPod({ namespace, labelSelector: `${kubernetesLabels.run}=${runId}` }))
        .items
      const containers = () => docker.containers(`${kubeletLabels.pod}=${pod?.metadata?.uid}`)
      expect(await containers()).toHaveLength(1)
      controller.abort(new Error("stop"))
      await expect(exec).rejects.toThrow("stop")
      expect(await remains(runId)).toEqual([])
      expect(await containers()).toEqual([])
    })

    it("asks for the task's resources as requests and limits, and its node enforces them on the container", async () => {
      const { run, runId } = await openRun()
      const output = collect()
      const controller = new AbortController()
      onTestFinished(() => controller.abort(new Error("test over")))
      const resources = { memoryBytes: 32 * 1024 * 1024, cpuMillis: 500 }
      const exec = run.exec(shell("echo up; sleep 30", { resources }), output, controller.signal)
      await until(() => output.out() !== "", 60_000)
      const [pod] = (await core.listNamespacedPod({ namespace, labelSelector: `${kubernetesLabels.run}=${runId}` }))
        .items
      expect(pod?.spec?.containers[0]?.resources).toEqual({
        requests: { cpu: "500m", memory: "32Mi" },
        limits: { cpu: "500m", memory: "32Mi" },
      })
      expect(pod?.status?.qosClass).toBe("Guaranteed")
      const [container] = await docker.containers(`${kubeletLabels.pod}=${pod?.metadata?.uid}`)
      expect(await hostConfig(container?.id ?? "")).toMatchObject({
        Memory: 33554432,
        NanoCpus: 500_000_000,
        CpuShares: 512,
        Privileged: false,
      })
      controller.abort(new Error("seen enough"))
      await expect(exec).rejects.toThrow("seen enough")
    })

    it("asks for Concourse's cpu shares as a cpu request alone, which the node turns back into the same weight", async () => {
      const { run, runId } = await openRun()
      const output = collect()
      const controller = new AbortController()
      onTestFinished(() => controller.abort(new Error("test over")))
      const exec = run.exec(shell("echo up; sleep 30", { resources: { cpuShares: 512 } }), output, controller.signal)
      await until(() => output.out() !== "", 60_000)
      const [pod] = (await core.listNamespacedPod({ namespace, labelSelector: `${kubernetesLabels.run}=${runId}` }))
        .items
      expect(pod?.spec?.containers[0]?.resources).toEqual({ requests: { cpu: "500m" } })
      expect(pod?.status?.qosClass).toBe("Burstable")
      const [container] = await docker.containers(`${kubeletLabels.pod}=${pod?.metadata?.uid}`)
      expect(await hostConfig(container?.id ?? "")).toMatchObject({ CpuShares: 512, NanoCpus: 0, Memory: 0 })
      controller.abort(new Error("seen enough"))
      await expect(exec).rejects.toThrow("seen enough")
    })

    it("makes a privileged task's Pod privileged, without the restrictive defaults", async () => {
      const { run } = await openRun()
      const specs = await podSpecs()
      await run.exec(shell("true", { privileged: true }), collect(), never).catch(() => {}) // see the contract suite
      expect(specs()[0]?.containers[0]?.securityContext).toEqual({ privileged: true })
    })

    it("pins every Pod of a run after the first, parallel ones too, to the first one's node with ReadWriteOnce", async () => {
      const { run } = await openRun()
      const specs = await podSpecs()
      const volume = await run.createVolume("shared")
      const task = (name: string) => shell("true", { path: `tasks/1/${name}`, mounts: { "/shared": volume } })
      await Promise.all([run.exec(task("a"), collect(), never), run.exec(task("b"), collect(), never)])
      await run.exec(task("c"), collect(), never)
      const seen = specs()
      expect(seen).toHaveLength(3)
      const [first, ...later] = seen
      expect(first?.affinity).toBeUndefined()
      expect(first?.nodeName).toBe(nodeName)
      for (const spec of later) {
        expect(spec.affinity).toEqual({
          nodeAffinity: {
            requiredDuringSchedulingIgnoredDuringExecution: {
              nodeSelectorTerms: [{ matchFields: [{ key: "metadata.name", operator: "In", values: [nodeName] }] }],
            },
          },
        })
      }
    })

    it("leaves a run's Pods free with ReadWriteMany", async () => {
      const driver = kubernetesDriverFactory({
        kubeConfig: running.kubeConfig,
        namespace,
        volumeSize: "1Gi",
        accessMode: "ReadWriteMany",
        unschedulableTimeoutMs: 5_000,
      }).create({})
      const { run } = await openRun(driver)
      const specs = await podSpecs()
      const volume = await run.createVolume("shared")
      const task = (name: string) => shell("true", { path: `tasks/1/${name}`, mounts: { "/shared": volume } })
      await run.exec(task("a"), collect(), never)
      await Promise.all([run.exec(task("b"), collect(), never), run.exec(task("c"), collect(), never)])
      expect(specs().map((spec) => spec.affinity)).toEqual([undefined, undefined, undefined])
    })

    it("ends with the image's name and the kubelet's message when the image cannot be pulled", async () => {
      const { run } = await openRun()
      const exec = run.exec(shell("true", { image: "runnel-test/no-such-image:1" }), collect(), never)
      await expect(exec).rejects.toBeInstanceOf(SystemError)
      await expect(exec).rejects.toThrow(
        /^image "runnel-test\/no-such-image:1" could not be pulled \((ErrImagePull|ImagePullBackOff)\): Failed to pull image "runnel-test\/no-such-image:1": .+/,
      )
    })
  })
})

// A long task's Pod changes nothing for minutes: the watch of it goes silent, and ends.
describeDocker("kubernetes driver on an API that sends watch bookmarks once a minute, as Kubernetes does", () => {
  it("ends a task that outlasts client-node's 30 s limit for a silent watch with its exit code, the watch opened again", async () => {
    const running = await startEmbeddedApi({ dockerHost, bookmarkIntervalMs: 60_000 })
    onTestFinished(() => running.close())
    const driver = kubernetesDriverFactory({
      kubeConfig: running.kubeConfig,
      namespace: "default",
      volumeSize: "1Gi",
      accessMode: "ReadWriteOnce",
      unschedulableTimeoutMs: 5_000,
    }).create({})
    const run = await driver.open("long")
    onTestFinished(() => run.close())
    const output = collect()
    const task: TaskSpec = {
      path: "tasks/1/long",
      name: "long",
      image: "busybox",
      command: { path: "sh", args: ["-c", "echo started; sleep 35; echo done; exit 3"] },
      env: {},
      mounts: {},
    }
    expect(await run.exec(task, output, never)).toEqual({ code: 3, timedOut: false })
    expect(output.out()).toBe("started\ndone\n")
  }, 90_000)
})

describe("kubernetes driver on an API whose node has no Docker daemon", () => {
  it("ends a task whose Pod stays unschedulable past the timeout with the scheduler's reason, and deletes the Pod", async () => {
    const running = await startEmbeddedApi({ dockerHost: join(import.meta.dirname, "no-such-docker.sock") })
    onTestFinished(() => running.close())
    const driver = kubernetesDriverFactory({
      kubeConfig: running.kubeConfig,
      namespace: "default",
      volumeSize: "1Gi",
      accessMode: "ReadWriteOnce",
      unschedulableTimeoutMs: 1_000,
    }).create({})
    const run = await driver.open("unschedulable")
    const task: TaskSpec = {
      path: "tasks/1/stuck",
      name: "stuck",
      image: "busybox",
      command: { path: "true", args: [] },
      env: {},
      mounts: {},
    }
    const exec = run.exec(task, collect(), never)
    await expect(exec).rejects.toBeInstanceOf(SystemError)
    await expect(exec).rejects.toThrow(
      /^task "tasks\/1\/stuck" could not be scheduled within 1 s: 0\/1 nodes are available: .*no-such-docker\.sock/,
    )
    const core = running.kubeConfig.makeApiClient(CoreV1Api)
    expect((await core.listNamespacedPod({ namespace: "default" })).items).toEqual([])
    await run.close()
  })
})

describe("kubernetes driver settings", () => {
  it("refuses driver_config: the server's flags choose the cluster", () => {
    const factory = kubernetesDriverFactory({
      kubeConfig: undefined as never,
      namespace: "default",
      volumeSize: "1Gi",
      accessMode: "ReadWriteOnce",
      unschedulableTimeoutMs: 1000,
    })
    expect(() => factory.create({ host: "x" })).toThrow(expect.objectContaining({ status: 400 }))
  })
})
