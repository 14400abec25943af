import { ApiException, CustomObjectsApi, PatchStrategy, setHeaderOptions, Watch } from "@kubernetes/client-node"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { parse } from "yaml"
import type { PipelineObject, RunObject } from "../lib/kube/resources.ts"
import { clusterConfig, type E2eServer, eventually, haveCluster, namespaceName, startServer } from "./cluster.ts"

// The operator's scenarios of operator/operator.test.ts and test/server.test.ts, against the cluster of
// KUBECONFIG: `runnel server --kubeconfig $KUBECONFIG` runs here, reconciling a namespace made for this run
// (deleted at the end), with the native driver so that no image is needed. Everything a controller does is
// awaited by polling, since in a cluster it happens asynchronously (cascading deletion is the garbage
// collector's work).
const maxInFlight = 2
const merge = setHeaderOptions("Content-Type", PatchStrategy.MergePatch)

describe.skipIf(!haveCluster)("runnel server --kubeconfig against the cluster of KUBECONFIG", () => {
  const namespace = namespaceName("operator")
  const group = { group: "runnel.dev", version: "v1alpha1", namespace }
  const pipelines = { ...group, plural: "pipelines" }
  const runs = { ...group, plural: "runs" }
  let server: E2eServer | undefined
  let objects: CustomObjectsApi

  beforeAll(async () => {
    objects = clusterConfig().makeApiClient(CustomObjectsApi)
    server = await startServer(namespace, ["--driver", "native", "--max-in-flight", String(maxInFlight)])
  })

  afterAll(async () => {
    await server?.stop()
  })

  const task = (name: string, shell: string) =>
    `await runtime.run({ name: ${JSON.stringify(name)}, image: "busybox", command: { path: "sh", args: ["-c", ${JSON.stringify(shell)}] } })`
  const script = (...lines: string[]) => `export const pipeline = async () => {\n  ${lines.join("\n  ")}\n}\n`

  /** Applies a manifest as a user's YAML file would be applied. */
  const apply = (manifest: string): Promise<unknown> => {
    const object = parse(manifest) as { kind: string }
    return objects.createNamespacedCustomObject({ ...(object.kind === "Run" ? runs : pipelines), body: object })
  }
  const pipelineYaml = (name: string, content: string) =>
    `apiVersion: runnel.dev/v1alpha1\nkind: Pipeline\nmetadata:\n  name: ${name}\nspec:\n  content: ${JSON.stringify(content)}\n`
  const runYaml = (name: string, pipeline: string) =>
    `apiVersion: runnel.dev/v1alpha1\nkind: Run\nmetadata:\n  name: ${name}\nspec:\n  pipelineRef:\n    name: ${pipeline}\n`

  const getRun = (name: string): Promise<RunObject> => objects.getNamespacedCustomObject({ ...runs, name })
  const getPipeline = (name: string): Promise<PipelineObject> =>
    objects.getNamespacedCustomObject({ ...pipelines, name })
  const ready = async (name: string) =>
    (await getPipeline(name)).status?.conditions?.find((condition) => condition.type === "Ready")
  const finished = (name: string) =>
    eventually(
      () => getRun(name),
      (run) => ["success", "failure", "error", "aborted"].includes(run.status?.phase ?? ""),
      `run ${name} finishes`,
    )
  const gone = (read: Promise<unknown>) =>
    read.then(
      () => false,
      (error: unknown) => error instanceof ApiException && error.code === 404,
    )

  it("makes an applied Pipeline Ready, and shows why a broken one is not, with its line", async () => {
    await apply(pipelineYaml("hello", script(task("greet", "echo hello"))))
    await apply(pipelineYaml("broken", "export const pipeline = async () => {\n  const x = ;\n}\n"))
    expect(
      await eventually(
        () => ready("hello"),
        (c) => c !== undefined,
        "hello is checked",
      ),
    ).toMatchObject({
      status: "True",
    })
    const broken = await eventually(
      () => ready("broken"),
      (c) => c !== undefined,
      "broken is checked",
    )
    expect(broken).toMatchObject({ status: "False", reason: "InvalidContent" })
    expect(broken?.message).toMatch(/^broken\.ts:2:13: /)
  })

  it(`runs Runs to success, at most ${maxInFlight} at once, first in first out`, async () => {
    await apply(pipelineYaml("slow", script(task("wait", "sleep 1"))))
    const phases = new Map<string, string>()
    let mostRunning = 0
    const watching = await new Watch(clusterConfig()).watch(
      `/apis/runnel.dev/v1alpha1/namespaces/${namespace}/runs`,
      {},
      (_type, run: RunObject) => {
        phases.set(run.metadata?.name ?? "", run.status?.phase ?? "")
        mostRunning = Math.max(mostRunning, [...phases.values()].filter((phase) => phase === "running").length)
      },
      () => {},
    )
    try {
      const names = ["q-1", "q-2", "q-3", "q-4", "q-5"]
      for (const name of names) await apply(runYaml(name, "slow"))
      const done = await Promise.all(names.map(finished))
      expect(done.map((run) => run.status?.phase)).toEqual(names.map(() => "success"))
      expect(mostRunning).toBeGreaterThan(0)
      expect(mostRunning).toBeLessThanOrEqual(maxInFlight)
      const byStart = [...done].sort(
        (a, b) => Date.parse(a.status?.startedAt ?? "") - Date.parse(b.status?.startedAt ?? ""),
      )
      expect(byStart.map((run) => run.metadata?.name)).toEqual(names)
      // The third could start only once one of the first two had finished.
      expect(Date.parse(done[2]?.status?.startedAt ?? "")).toBeGreaterThanOrEqual(
        Math.min(...done.slice(0, 2).map((run) => Date.parse(run.status?.finishedAt ?? ""))),
      )
    } finally {
      watching.abort()
    }
  })

  it("aborts a running Run when spec.stop is set", async () => {
    await apply(pipelineYaml("long", script(task("sleep", "sleep 30"))))
    await apply(runYaml("long-1", "long"))
    await eventually(
      () => getRun("long-1"),
      (run) => run.status?.tasks?.[0]?.status === "running",
      "the task runs",
    )
    const stoppedAt = Date.now()
    await objects.patchNamespacedCustomObject({ ...runs, name: "long-1", body: { spec: { stop: true } } }, merge)
    const run = await finished("long-1")
    expect(Date.now() - stoppedAt).toBeLessThan(15_000)
    expect(run.status).toMatchObject({ phase: "aborted", code: 130 })
    expect(run.status?.tasks?.[0]).toMatchObject({ path: "tasks/1/sleep", status: "aborted" })
  })

  it("deletes a Pipeline's Runs with it (the cluster's garbage collector does, in its own time)", async () => {
    await apply(pipelineYaml("doomed", script(task("sleep", "sleep 30"))))
    await apply(runYaml("doomed-1", "doomed"))
    await apply(runYaml("doomed-2", "doomed"))
    for (const name of ["doomed-1", "doomed-2"]) {
      await eventually(
        () => getRun(name),
        (run) => (run.metadata?.ownerReferences ?? []).some((owner) => owner.kind === "Pipeline"),
        `${name} is owned by its pipeline`,
      )
    }
    await objects.deleteNamespacedCustomObject({ ...pipelines, name: "doomed" })
    await eventually(
      async () => (await gone(getRun("doomed-1"))) && (await gone(getRun("doomed-2"))),
      (both) => both,
      "both runs are deleted",
      120_000,
    )
    expect(server?.stderr()).not.toMatch(/unhandled|TypeError/i)
  })
})
