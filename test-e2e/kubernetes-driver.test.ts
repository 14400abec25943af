import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { CoreV1Api } from "@kubernetes/client-node"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { runnel } from "../test/cli.ts"
import { clusterConfig, type E2eServer, eventually, haveCluster, namespaceName, startServer } from "./cluster.ts"

// The examples of issue 17's "Done when" with `--driver kubernetes`: `runnel server --kubeconfig $KUBECONFIG`
// runs here, and every task of every run is a Pod of this suite's namespace in the cluster of KUBECONFIG
// (busybox must be pullable there, or loaded into its nodes). Pipelines are stored and run through the CLI as a
// user would (`runnel pipeline set`, `runnel pipeline run`), and after each run the namespace is checked for what
// the driver must not leave behind: Pods, and Secrets holding a secret value.
const secretValue = "bonjour-e2e-secret"

describe.skipIf(!haveCluster)("runnel server --driver kubernetes: tasks as Pods of the cluster of KUBECONFIG", () => {
  const namespace = namespaceName("pods")
  let server: E2eServer | undefined
  let core: CoreV1Api
  let work: string

  beforeAll(async () => {
    core = clusterConfig().makeApiClient(CoreV1Api)
    work = mkdtempSync(join(tmpdir(), "runnel-e2e-pods-"))
    server = await startServer(namespace, ["--driver", "kubernetes", "--allowed-drivers", "kubernetes"])
  })

  afterAll(async () => {
    await server?.stop()
    if (work !== undefined) rmSync(work, { recursive: true, force: true })
  })

  const cli = (command: string, ...args: string[]) => runnel(["pipeline", command, "-s", server?.url ?? "", ...args])
  const set = async (file: string, ...args: string[]) => {
    const stored = await cli("set", file, ...args)
    expect(stored.code, stored.stderr).toBe(0)
  }

  /** Once a run has ended its Pods are deleted; no Secret of the namespace holds the secret value. */
  const leavesNothing = async () => {
    await eventually(
      async () => (await core.listNamespacedPod({ namespace })).items.map((pod) => pod.metadata?.name),
      (names) => names.length === 0,
      "the run's Pods are deleted",
    )
    const encoded = Buffer.from(secretValue).toString("base64")
    for (const secret of (await core.listNamespacedSecret({ namespace })).items) {
      expect(JSON.stringify(secret), secret.metadata?.name).not.toContain(encoded)
    }
  }

  it("hello: one task's output reaches the script", async () => {
    await set("examples/hello.ts")
    const run = await cli("run", "hello")
    expect(run.code, run.stderr).toBe(0)
    expect(run.stdout).toContain("hello from runnel\n")
    expect(run.stdout).toContain("the task said: hello from runnel\n")
    await leavesNothing()
  })

  it("parallel: three tasks at once", async () => {
    await set("examples/parallel.ts")
    const run = await cli("run", "parallel")
    expect(run.code, run.stderr).toBe(0)
    for (const name of ["one", "two", "three"]) expect(run.stdout).toContain(`${name}\n`)
    expect(run.stdout).toContain("all 3 tasks succeeded\n")
    await leavesNothing()
  })

  it("shared volume: the second task reads what the first wrote (a claim of the run)", async () => {
    await set("examples/shared-volume.ts")
    const run = await cli("run", "shared-volume")
    expect(run.code, run.stderr).toBe(0)
    expect(run.stdout).toContain("the second task read what the first one wrote\n")
    await leavesNothing()
    await eventually(
      async () => (await core.listNamespacedPersistentVolumeClaim({ namespace })).items.length,
      (claims) => claims === 0,
      "the run's claims are deleted with it",
    )
  })

  it("env and secrets: args and env reach the task, the secret only redacted, in no Pod or Secret after", async () => {
    await set("examples/env-and-args.ts", "-e", `GREETING=${secretValue}`)
    const run = await cli("run", "env-and-args", "--", "first", "second")
    expect(run.code, run.stderr).toBe(0)
    expect(run.stdout).toContain("args: first second\n")
    expect(run.stdout).toContain("target: staging\n")
    expect(run.stdout).toContain("greeting: ***REDACTED***\n")
    expect(run.stdout + run.stderr).not.toContain(secretValue)
    await leavesNothing()
  })

  it("failing task: its exit code reaches the script, which handles it", async () => {
    await set("examples/failing-task.ts")
    const run = await cli("run", "failing-task")
    expect(run.code, run.stderr).toBe(0)
    expect(run.stderr).toContain("about to fail\n")
    expect(run.stdout).toContain("the check task exited 3; handled, carrying on\n")
    await leavesNothing()
  })

  it("throwing pipeline: the run fails with the error and its line, exit 1", async () => {
    await set("examples/throwing.ts")
    const run = await cli("run", "throwing")
    expect(run.code).toBe(1)
    expect(run.stdout).toContain("found version: 1.4.0-dev\n")
    expect(run.stderr).toMatch(/Error: deploy refused: version is not tagged \(at throwing\.ts:\d+:\d+\)/)
    await leavesNothing()
  })

  it("a YAML pipeline with a get, a task and a cache: the cache claim outlives the run", async () => {
    const file = join(work, "get-task-cache.yml")
    writeFileSync(
      file,
      `resources:
  - name: config
    type: mock
    source: {initial_version: v1, create_files: {settings.txt: "color: blue"}}
jobs:
  - name: build
    plan:
      - get: config
      - task: count
        config:
          platform: linux
          image_resource: {type: registry-image, source: {repository: busybox}}
          inputs: [{name: config}]
          caches: [{path: counts}]
          run:
            path: sh
            args: [-c, 'n=$(( $(cat counts/n 2>/dev/null || echo 0) + 1 )); echo $n > counts/n; cat config/settings.txt; echo; echo "runs so far: $n"']
`,
    )
    await set(file)
    const first = await cli("run", "get-task-cache")
    expect(first.code, first.stderr).toBe(0)
    expect(first.stdout).toContain("color: blue\n")
    expect(first.stdout).toContain("runs so far: 1\n")
    const second = await cli("run", "get-task-cache")
    expect(second.code, second.stderr).toBe(0)
    expect(second.stdout).toContain("runs so far: 2\n")
    await leavesNothing()
  })
})
