import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { CoreV1Api } from "@kubernetes/client-node"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type CliResult, runnel } from "../test/cli.ts"
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

  type Example = { file: string; set?: string[]; args?: string[]; code: number; check: (run: CliResult) => void }
  const examples: Example[] = [
    {
      file: "hello.ts",
      code: 0,
      check: ({ stdout }) => expect(stdout).toContain("hello from runnel\nthe task said: hello from runnel\n"),
    },
    {
      file: "parallel.ts",
      code: 0,
      check: ({ stdout }) => {
        for (const name of ["one", "two", "three"]) expect(stdout).toContain(`${name}\n`)
        expect(stdout).toContain("all 3 tasks ran at the same time and succeeded\n")
      },
    },
    {
      file: "shared-volume.ts",
      code: 0,
      check: ({ stdout }) => expect(stdout).toContain("the second task read what the first one wrote\n"),
    },
    {
      file: "env-and-args.ts",
      set: ["-e", `GREETING=${secretValue}`],
      args: ["--", "first", "second"],
      code: 0,
      check: ({ stdout, stderr }) => {
        for (const line of ["args: first second", "target: staging", "greeting: ***REDACTED***"]) {
          expect(stdout).toContain(`${line}\n`)
        }
        expect(stdout + stderr).not.toContain(secretValue)
      },
    },
    {
      file: "failing-task.ts",
      code: 0,
      check: ({ stdout, stderr }) => {
        expect(stderr).toContain("about to fail\n")
        expect(stdout).toContain("the check task exited 3; handled, carrying on\n")
      },
    },
    {
      file: "throwing.ts",
      code: 1,
      check: ({ stdout, stderr }) => {
        expect(stdout).toContain("found version: 1.4.0-dev\n")
        expect(stderr).toMatch(/Error: deploy refused: version is not tagged \(at throwing\.ts:\d+:\d+\)/)
      },
    },
  ]

  it.each(examples)(
    "runs examples/$file with exit code $code, its Pods, Secrets and claims gone after",
    async ({ file, set: setArgs = [], args = [], code, check }) => {
      await set(`examples/${file}`, ...setArgs)
      const run = await cli("run", file.replace(/\.ts$/, ""), ...args)
      expect(run.code, run.stderr).toBe(code)
      check(run)
      await leavesNothing()
      // A run's claims are deleted with it (YAML caches, below, outlive it).
      await eventually(
        async () => (await core.listNamespacedPersistentVolumeClaim({ namespace })).items.length,
        (claims) => claims === 0,
        "the run's claims are deleted",
      )
    },
  )

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
