import { type ChildProcess, execFile, execFileSync, spawn } from "node:child_process"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { CustomObjectsApi, KubeConfig } from "@kubernetes/client-node"
import { afterAll, describe, expect, it } from "vitest"
import { startEmbeddedApi } from "../kubeserver/embedded-api.fixture.ts"
import { loadCrds } from "../kubeserver/resource-types.ts"
import type { PipelineObject, RunObject } from "../lib/kube/resources.ts"
import { openSqliteLogStore } from "../lib/logs/sqlite-log-store.ts"
import { root, runnel, runnelBin } from "./cli.ts"
import { describeDocker } from "./docker.ts"

// `runnel server` as a user starts it: bin/runnel in its own process, on a temp directory, driven over HTTP
// with client-node and the machine's kubectl.
const dir = mkdtempSync(join(tmpdir(), "runnel-server-test-"))
const started = new Set<ChildProcess>()
afterAll(() => {
  for (const child of started) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL")
  rmSync(dir, { recursive: true, force: true })
})

const kubectlAvailable = (() => {
  try {
    execFileSync("kubectl", ["version", "--client"], { stdio: "ignore" })
    return true
  } catch {
    console.warn("kubectl is not installed: the kubectl test of runnel server is skipped")
    return false
  }
})()

let servers = 0

/**
 * Starts bin/runnel server on a free port in `cwd` (a new directory unless
 * given: the database is runnel.db there); resolves once it prints its
 * listening line. `exited` resolves with the exit code, or the signal that ended it.
 */
async function startServer(args: readonly string[] = [], cwd = mkdtempSync(join(dir, `server-${++servers}-`))) {
  const child = spawn(runnelBin, ["server", "--port", "0", ...args], { cwd, stdio: ["ignore", "pipe", "pipe"] })
  started.add(child)
  let stdout = ""
  let stderr = ""
  const exited = new Promise<number | NodeJS.Signals>((resolve) =>
    child.on("exit", (code, signal) => resolve(code ?? signal ?? -1)),
  )
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no listening line within 20 s; stderr: ${stderr}`)), 20_000)
    child.stdout?.setEncoding("utf8").on("data", (text: string) => {
      stdout += text
      const match = /listening on (http:\/\/\S+)/.exec(stdout)
      if (match?.[1] !== undefined) {
        clearTimeout(timer)
        resolve(match[1])
      }
    })
    child.stderr?.setEncoding("utf8").on("data", (text: string) => {
      stderr += text
    })
    void exited.then((code) => reject(new Error(`runnel server exited (${code}) before listening: ${stderr}`)))
  })
  const kubeConfig = new KubeConfig()
  kubeConfig.loadFromOptions({
    clusters: [{ name: "runnel", server: `${url}/k8s`, skipTLSVerify: true }],
    users: [{ name: "tester" }],
    contexts: [{ name: "runnel", cluster: "runnel", user: "tester", namespace: "default" }],
    currentContext: "runnel",
  })
  return {
    url,
    child,
    objects: kubeConfig.makeApiClient(CustomObjectsApi),
    stdout: () => stdout,
    stderr: () => stderr,
    exited,
    cwd,
  }
}

/** A kubeconfig file for a plain-http server: client-node needs TLS verification off to speak http. */
const kubeconfigText = (server: string) => `apiVersion: v1
kind: Config
clusters:
  - name: elsewhere
    cluster: { server: "${server}", insecure-skip-tls-verify: true }
users:
  - name: someone
    user: {}
contexts:
  - name: elsewhere
    context: { cluster: elsewhere, user: someone, namespace: default }
current-context: elsewhere
`

type RunningServer = Awaited<ReturnType<typeof startServer>>

const group = { group: "runnel.dev", version: "v1alpha1", namespace: "default" }

const script = (...tasks: [name: string, shell: string][]) =>
  `export const pipeline = async () => {\n${tasks
    .map(
      ([name, shell]) =>
        `  await runtime.run({ name: "${name}", image: "busybox", command: { path: "sh", args: ["-c", ${JSON.stringify(shell)}] } })\n`,
    )
    .join("")}}\n`

function createPipeline(server: RunningServer, name: string, content: string): Promise<PipelineObject> {
  return server.objects.createNamespacedCustomObject({
    ...group,
    plural: "pipelines",
    body: { apiVersion: "runnel.dev/v1alpha1", kind: "Pipeline", metadata: { name }, spec: { content } },
  })
}

function createRun(server: RunningServer, name: string, pipeline: string): Promise<RunObject> {
  return server.objects.createNamespacedCustomObject({
    ...group,
    plural: "runs",
    body: {
      apiVersion: "runnel.dev/v1alpha1",
      kind: "Run",
      metadata: { name },
      spec: { pipelineRef: { name: pipeline } },
    },
  })
}

const getRun = (server: RunningServer, name: string): Promise<RunObject> =>
  server.objects.getNamespacedCustomObject({ ...group, plural: "runs", name })

async function eventually<T>(read: () => Promise<T>, holds: (value: T) => boolean, what: string, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await read()
    if (holds(value)) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}; last: ${JSON.stringify(value)}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

const phaseOf = (server: RunningServer, name: string) => async () => (await getRun(server, name)).status?.phase

describe("runnel server", () => {
  it("prints the listening line with the port it took, answers /health, and exits 0 on SIGTERM", async () => {
    const server = await startServer(["--driver", "native"])
    expect(server.stdout()).toMatch(/^runnel: listening on http:\/\/127\.0\.0\.1:\d+\n$/)
    expect(server.url).not.toMatch(/:0$/)
    const health = await fetch(`${server.url}/health`)
    expect(health.status).toBe(200)
    expect(await health.json()).toEqual({ status: "ok" })
    const unknown = await fetch(`${server.url}/nowhere`)
    expect(unknown.status).toBe(404)
    expect(await unknown.json()).toEqual({ error: expect.stringContaining("no route for GET /nowhere") })
    server.child.kill("SIGTERM")
    expect(await server.exited).toBe(0)
  })

  it("refuses an unknown driver at start with the known ones", async () => {
    const child = spawn(runnelBin, ["server", "--port", "0", "--driver", "podman"], { cwd: dir })
    let stderr = ""
    child.stderr.setEncoding("utf8").on("data", (text: string) => {
      stderr += text
    })
    const code = await new Promise((resolve) => child.on("exit", resolve))
    expect(code).toBe(2)
    expect(stderr).toBe('runnel: unknown driver "podman"; known: docker, native, kubernetes\n')
  })

  it.skipIf(!kubectlAvailable)(
    "makes a Pipeline applied with kubectl Ready, or shows why not with the line, and runs a Run created with kubectl",
    async () => {
      const server = await startServer(["--driver", "native"])
      const manifest = join(dir, "pipelines.yaml")
      writeFileSync(
        manifest,
        `apiVersion: runnel.dev/v1alpha1
kind: Pipeline
metadata:
  name: hello
spec:
  content: ${JSON.stringify(script(["greet", "echo hello"]))}
---
apiVersion: runnel.dev/v1alpha1
kind: Pipeline
metadata:
  name: broken
spec:
  content: ${JSON.stringify("export const pipeline = async () => {\n  const x = ;\n}\n")}
---
apiVersion: runnel.dev/v1alpha1
kind: Run
metadata:
  name: hello-1
spec:
  pipelineRef:
    name: hello
`,
      )
      const kubectl = (...args: string[]) =>
        new Promise<string>((resolve, reject) =>
          execFile(
            "kubectl",
            ["--server", `${server.url}/k8s`, "--cache-dir", join(dir, "kube-cache"), ...args],
            { env: { ...process.env, KUBECONFIG: join(dir, "no-kubeconfig") }, timeout: 20_000 },
            (error, stdout, stderr) => (error === null ? resolve(stdout) : reject(new Error(stderr))),
          ),
        )
      expect(await kubectl("apply", "-f", manifest)).toContain("pipeline.runnel.dev/hello created")
      const ready = async (name: string) => {
        const pipeline: PipelineObject = await server.objects.getNamespacedCustomObject({
          ...group,
          plural: "pipelines",
          name,
        })
        return pipeline.status?.conditions?.find((condition) => condition.type === "Ready")
      }
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
      expect(broken?.message).toMatch(/^broken\.ts:2:13: Unexpected ";"/)
      await eventually(phaseOf(server, "hello-1"), (phase) => phase === "success", "the run succeeds")
      const table = await kubectl("get", "runs.runnel.dev", "hello-1")
      expect(table).toMatch(/hello-1\s+hello\s+success\s+0\s+\S+s\s+/)
      server.child.kill("SIGTERM")
      expect(await server.exited).toBe(0)
    },
  )

  it("lets a running run finish on SIGTERM within --shutdown-grace, then exits 0", async () => {
    const server = await startServer(["--driver", "native", "--shutdown-grace", "20s"])
    await createPipeline(server, "short", script(["wait", "sleep 1"]))
    await createRun(server, "short-1", "short")
    await eventually(phaseOf(server, "short-1"), (phase) => phase === "running", "the run starts")
    server.child.kill("SIGTERM")
    expect(await server.exited).toBe(0)
    const again = await startServer(["--driver", "native"], server.cwd)
    expect((await getRun(again, "short-1")).status).toMatchObject({ phase: "success", code: 0 })
    again.child.kill("SIGTERM")
    expect(await again.exited).toBe(0)
  })

  it("aborts a run still running when --shutdown-grace is over, and exits 0", async () => {
    const server = await startServer(["--driver", "native", "--shutdown-grace", "300ms"])
    await createPipeline(server, "long", script(["wait", "sleep 30"]))
    await createRun(server, "long-1", "long")
    await eventually(phaseOf(server, "long-1"), (phase) => phase === "running", "the run starts")
    const stoppedAt = Date.now()
    server.child.kill("SIGTERM")
    expect(await server.exited).toBe(0)
    expect(Date.now() - stoppedAt).toBeLessThan(10_000)
    const again = await startServer(["--driver", "native"], server.cwd)
    const run = await getRun(again, "long-1")
    expect(run.status).toMatchObject({ phase: "aborted", code: 130 })
    expect(run.status?.message).toContain("--shutdown-grace")
    again.child.kill("SIGTERM")
    expect(await again.exited).toBe(0)
  })
})

describe("runnel operator", () => {
  it("reconciles against the Kubernetes API its --kubeconfig names and exits 0 on SIGTERM", async () => {
    const api = await startEmbeddedApi({ crds: loadCrds(join(root, "crds")) })
    try {
      const kubeconfig = join(api.dir, "kubeconfig.yaml")
      writeFileSync(kubeconfig, kubeconfigText(api.server))
      const child = spawn(runnelBin, ["operator", "--kubeconfig", kubeconfig, "--driver", "native"], {
        cwd: api.dir,
        stdio: ["ignore", "ignore", "pipe"],
      })
      started.add(child)
      let stderr = ""
      child.stderr.setEncoding("utf8").on("data", (text: string) => {
        stderr += text
      })
      const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve(code ?? signal)))
      const objects = api.kubeConfig.makeApiClient(CustomObjectsApi)
      const server = { objects } as RunningServer
      await createPipeline(server, "remote", script(["greet", "echo from afar"]))
      await createRun(server, "remote-1", "remote")
      await eventually(phaseOf(server, "remote-1"), (phase) => phase === "success", "the run succeeds")
      expect(stderr).toContain(`operator reconciling namespace "default" at ${api.server}`)
      child.kill("SIGTERM")
      expect(await exited).toBe(0)
    } finally {
      await api.close()
    }
  })
})

describe("runnel operator on bad input", () => {
  it("stops with a message when the API does not serve runnel's resources", async () => {
    const api = await startEmbeddedApi({ crds: [] })
    try {
      const kubeconfig = join(api.dir, "kubeconfig.yaml")
      writeFileSync(kubeconfig, kubeconfigText(api.server))
      const result = await runnel(["operator", "--kubeconfig", kubeconfig, "--driver", "native"], { cwd: api.dir })
      expect(result.code).toBe(2)
      expect(result.stderr).toContain(
        "does not serve /apis/runnel.dev/v1alpha1/namespaces/default/pipelines; install runnel's CRDs",
      )
    } finally {
      await api.close()
    }
  })
})

describeDocker("runnel server with Docker, killed during a run", () => {
  it("resumes the run from its unfinished task after SIGKILL and a restart on the same database, leaving no container", async () => {
    const first = await startServer(["--driver", "docker"])
    // Each task prints one line when it starts: the log store keeps every attempt's output, so the count of
    // lines of a task is the number of times it ran.
    await createPipeline(
      first,
      "three",
      script(["one", "echo ran one"], ["two", "echo ran two; sleep 4"], ["three", "echo ran three"]),
    )
    await createRun(first, "three-1", "three")
    await eventually(
      async () => (await getRun(first, "three-1")).status?.tasks?.find((task) => task.path === "tasks/2/two")?.status,
      (status) => status === "running",
      "the second task runs",
    )
    await new Promise((resolve) => setTimeout(resolve, 1000)) // its line is printed and stored
    first.child.kill("SIGKILL")
    expect(await first.exited).toBe("SIGKILL")

    const second = await startServer(["--driver", "docker"], first.cwd)
    const run = await eventually(
      () => getRun(second, "three-1"),
      (resumed) => resumed.status?.phase !== "running",
      "the resumed run finishes",
      60_000,
    )
    expect(run.status).toMatchObject({ phase: "success", code: 0 })
    expect(run.status?.tasks?.map((task) => [task.path, task.status])).toEqual([
      ["tasks/1/one", "success"],
      ["tasks/2/two", "success"],
      ["tasks/3/three", "success"],
    ])
    second.child.kill("SIGTERM")
    expect(await second.exited).toBe(0)

    const store = await openSqliteLogStore(join(first.cwd, "runnel-logs.db"))
    try {
      const lines = (path: string) => store.output("three-1", path, "stdout").split("\n").filter(Boolean)
      expect(lines("tasks/1/one")).toEqual(["ran one"]) // finished before the kill: not run again
      expect(lines("tasks/2/two")).toEqual(["ran two", "ran two"]) // interrupted: run again from the start
      expect(lines("tasks/3/three")).toEqual(["ran three"])
    } finally {
      await store.close()
    }
    const left = execFileSync("docker", ["ps", "-a", "-q", "--filter", "label=dev.runnel.run=three-1"], {
      encoding: "utf8",
    })
    expect(left.trim()).toBe("")
  })
})
