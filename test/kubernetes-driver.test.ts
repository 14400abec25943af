import { execFile } from "node:child_process"
import { readFile } from "node:fs/promises"
import { join } from "node:path"
import { promisify } from "node:util"
import { afterAll, beforeAll, expect, it } from "vitest"
import { root } from "./cli.ts"
import { describeDocker, dockerHost } from "./docker.ts"
import {
  type Answer,
  call,
  eventually,
  kubectl,
  runToEnd,
  type ServerProcess,
  serverProcesses,
} from "./server-process.ts"

// The examples on a real `runnel server --driver kubernetes`: every task is a Pod of the embedded API,
// run by its node in Docker. The same pipelines as test/examples.test.ts and test/yaml-examples.test.ts.

const secret = "bonjour-secret-value"
type Task = { path: string; status: string; code: number | null; stdout: string; stderr: string }
const run = promisify(execFile)

describeDocker("examples on runnel server --driver kubernetes", () => {
  const servers = serverProcesses("runnel-kubernetes-driver-")
  let server: ServerProcess
  beforeAll(async () => {
    if (dockerHost !== undefined) process.env.DOCKER_HOST = dockerHost
    server = await servers.start(["--driver", "kubernetes", "--secret", `GREETING=${secret}`])
  })
  afterAll(() => servers.cleanUp())

  const api = (method: string, path: string, body?: unknown): Promise<Answer> => call(server.url, method, path, body)

  async function store(name: string, file: string, contentType: "ts" | "yaml") {
    const content = await readFile(`${root}/examples/${file}`, "utf8")
    const answer = await api("PUT", `/api/pipelines/${name}`, { content, content_type: contentType })
    expect(answer.status, JSON.stringify(answer.body)).toBe(201)
    expect(answer.body.driver).toBe("kubernetes")
  }

  const outputOf = (tasks: Task[]) => tasks.map((task) => task.stdout).join("")

  it.each([
    ["hello", "hello.ts", "success", "hello from runnel\n"],
    ["parallel", "parallel.ts", "success", "three\n"],
    ["shared-volume", "shared-volume.ts", "success", ""],
    ["failing-task", "failing-task.ts", "success", ""],
    ["throwing", "throwing.ts", "failure", "1.4.0-dev"],
  ])("runs %s (examples/%s) as Pods, ending %s", async (name, file, status, output) => {
    await store(name, file, "ts")
    const { run, tasks } = await runToEnd(server.url, name, 120_000)
    expect(run.status, JSON.stringify(run)).toBe(status)
    expect(outputOf(tasks)).toContain(output)
  })

  it("runs a failing task as a failure with its exit code", async () => {
    await store("failing-code", "failing-task.ts", "ts")
    const { tasks } = await runToEnd(server.url, "failing-code", 120_000)
    expect(tasks.map((task: Task) => [task.status, task.code])).toContainEqual(["failure", 3])
  })

  it("runs env-and-args with its secret redacted", async () => {
    await store("env-and-secrets", "env-and-args.ts", "ts")
    const { run, tasks } = await runToEnd(server.url, "env-and-secrets", 120_000)
    expect(run.status).toBe("success")
    expect(outputOf(tasks)).toContain("greeting: ***REDACTED***\n")
    expect(JSON.stringify(tasks)).not.toContain(secret)
  })

  it("shows a running task's Pod to kubectl get pods -l and logs -f, with no secret value in it", async () => {
    const content = `export const pipeline = async () => {
  await runtime.run({
    name: "ticker",
    image: "busybox",
    command: { path: "sh", args: ["-c", "for i in 1 2 3; do echo tick $i; sleep 1; done"] },
    env: { GREETING: "secret:GREETING" },
  })
}
`
    expect((await api("PUT", "/api/pipelines/ticker", { content, content_type: "ts" })).status).toBe(201)
    const runId = (await api("POST", "/api/pipelines/ticker/trigger")).body.run_id
    const selector = `runnel.dev/run=${runId}`
    const listed = await eventually(
      () => kubectl(server, "get", "pods", "-l", selector, "--no-headers"),
      (text) => /Running/.test(text),
      "the task's Pod runs",
      60_000,
    )
    const podName = listed.split(/\s+/)[0] ?? ""
    expect(podName).not.toBe("")
    expect(await kubectl(server, "get", "pods", "-l", selector, "-o", "yaml")).not.toContain(secret)
    expect(await kubectl(server, "logs", "-f", podName)).toContain("tick 3\n")
    const run = await eventually(
      () => api("GET", `/api/runs/${runId}`),
      (answer) => ["success", "failure", "error"].includes(answer.body.status),
      "the run finishes",
      60_000,
    )
    expect(run.body.status).toBe("success")
  })

  it("runs a YAML pipeline with a get, a task and a cache", async () => {
    await store("yaml-get", "yaml/get.yml", "yaml")
    const got = await runToEnd(server.url, "yaml-get", 120_000)
    expect(got.run.status, JSON.stringify(got.tasks)).toBe("success")
    expect(outputOf(got.tasks)).toContain("version: v1\n")
    await store("yaml-cache", "yaml/cache.yml", "yaml")
    expect(outputOf((await runToEnd(server.url, "yaml-cache", 120_000)).tasks)).toContain("runs so far: 1\n")
    expect(outputOf((await runToEnd(server.url, "yaml-cache", 120_000)).tasks)).toContain("runs so far: 2\n")
  })

  it("ends a YAML task past container_limits.memory as a failure, its Pod OOM-killed, the reason in its stderr", async () => {
    const content = `jobs:
- name: j
  plan:
  - task: hungry
    container_limits: {memory: 16MB}
    config:
      platform: linux
      image_resource: {type: registry-image, source: {repository: busybox}}
      run: {path: sh, args: [-c, "head -c 64m /dev/zero | tail"]}
`
    expect((await api("PUT", "/api/pipelines/hungry", { content, content_type: "yaml" })).status).toBe(201)
    const { run, tasks } = await runToEnd(server.url, "hungry", 120_000)
    expect(run.status).toBe("failure")
    const [task] = tasks as Task[]
    expect([task?.status, task?.code]).toEqual(["failure", 137])
    expect(task?.stderr).toContain(
      "runnel: the task used more memory than its limit of 16Mi and was killed (OOMKilled)",
    )
  })

  it("refuses a privileged task, naming the server's flag, before any Pod is made", async () => {
    const content = `export const pipeline = async () => {
  await runtime.run({ name: "root", image: "busybox", command: { path: "true" }, privileged: true })
}
`
    expect((await api("PUT", "/api/pipelines/root", { content, content_type: "ts" })).status).toBe(201)
    const { run, tasks } = await runToEnd(server.url, "root", 60_000)
    expect(run.status).toBe("error")
    expect(run.error_message).toBe(
      'task "tasks/1/root" asks to run privileged, which is not allowed here; start runnel server (or runnel operator) with --allow-privileged-tasks (CI_ALLOW_PRIVILEGED_TASKS=true) to allow it',
    )
    expect((tasks as Task[]).map((task) => task.status)).toEqual(["error"])
  })

  it("leaves no Pod, Secret or run claim behind once the runs ended", async () => {
    const left = await kubectl(
      server,
      "get",
      "pods,secrets,pvc",
      "-l",
      "app.kubernetes.io/managed-by=runnel",
      "-o",
      "name",
    )
    // Only the cache claim outlives its runs.
    expect(left.split("\n").filter((line) => line !== "" && !line.includes("runnel-cache-"))).toEqual([])
  })
})

describeDocker("runnel server --driver kubernetes --allow-privileged-tasks", () => {
  const servers = serverProcesses("runnel-kubernetes-privileged-")
  afterAll(() => servers.cleanUp())

  // The Pod is privileged: it mounts a tmpfs, or (a Docker daemon inside a container, as on runnel's
  // build machines) the runtime refuses every capability in its own words; runnel refuses nothing.
  it("runs a privileged task as a privileged Pod", async () => {
    const server = await servers.start(["--driver", "kubernetes", "--allow-privileged-tasks"])
    const content = `export const pipeline = async () => {
  await runtime.run({ name: "root", image: "busybox", command: { path: "sh", args: ["-c", "sleep 1; mount -t tmpfs none /mnt && echo mounted"] }, privileged: true })
}
`
    expect((await call(server.url, "PUT", "/api/pipelines/root", { content, content_type: "ts" })).status).toBe(201)
    const runId = (await call(server.url, "POST", "/api/pipelines/root/trigger")).body.run_id
    const context = await eventually(
      () =>
        kubectl(
          server,
          "get",
          "pods",
          "-l",
          `runnel.dev/run=${runId}`,
          "-o",
          "jsonpath={.items[0].spec.containers[0].securityContext}",
        ),
      (text) => text !== "",
      "the task's Pod exists",
      60_000,
    )
    expect(JSON.parse(context)).toEqual({ privileged: true })
    const run = await eventually(
      () => call(server.url, "GET", `/api/runs/${runId}`),
      (answer) => ["success", "failure", "error"].includes(answer.body.status),
      "the run finishes",
      60_000,
    )
    const tasks = (await call(server.url, "GET", `/api/runs/${runId}/tasks`)).body as Task[]
    if (run.body.status === "success") expect(tasks[0]?.stdout).toBe("mounted\n")
    else expect(run.body.error_message).toMatch(/apply caps|operation not permitted/)
  })
})

describeDocker("runnel server --driver kubernetes killed mid-task", () => {
  const servers = serverProcesses("runnel-kubernetes-restart-")
  afterAll(() => servers.cleanUp())

  it("leaves no Pod, Secret, claim or container behind after a restart, and resumes the run", async () => {
    const first = await servers.start(["--driver", "kubernetes", "--secret", `GREETING=${secret}`])
    const content = `export const pipeline = async () => {
  const shared = volumes.create({ name: "shared" })
  await runtime.run({
    name: "slow",
    image: "busybox",
    command: { path: "sh", args: ["-c", "echo started; sleep 3; echo finished"] },
    env: { GREETING: "secret:GREETING" },
    mounts: { "/shared": shared },
  })
}
`
    expect((await call(first.url, "PUT", "/api/pipelines/slow", { content, content_type: "ts" })).status).toBe(201)
    const runId = (await call(first.url, "POST", "/api/pipelines/slow/trigger")).body.run_id
    const selector = `runnel.dev/run=${runId}`
    await eventually(
      () => kubectl(first, "get", "pods", "-l", selector, "--no-headers"),
      (text) => /Running/.test(text),
      "the task's Pod runs",
      60_000,
    )
    const before = await kubectl(first, "get", "pods", "-l", selector, "-o", "jsonpath={.items[0].metadata.uid}")
    const exited = new Promise((resolve) => first.child.once("exit", resolve))
    first.child.kill("SIGKILL")
    await exited

    const second = await servers.start([
      "--driver",
      "kubernetes",
      "--secret",
      `GREETING=${secret}`,
      "--storage-sqlite-path",
      join(first.cwd, "runnel.db"),
    ])
    const run = await eventually(
      () => call(second.url, "GET", `/api/runs/${runId}`),
      (answer) => ["success", "failure", "error"].includes(answer.body.status),
      "the resumed run finishes",
      120_000,
    )
    expect(run.body.status, JSON.stringify(run.body)).toBe("success")
    const left = await eventually(
      () => kubectl(second, "get", "pods,secrets,pvc", "-l", selector, "-o", "name"),
      (text) => text === "",
      "the run's Pods, Secrets and claims are gone",
      60_000,
    )
    expect(left).toBe("")
    const containers = await eventually(
      () => dockerContainers(`dev.runnel.kube.pod=${before}`),
      (ids) => ids === "",
      "the killed server's task container is gone",
      60_000,
    )
    expect(containers).toBe("")
  })
})

async function dockerContainers(label: string): Promise<string> {
  const { stdout } = await run("docker", ["ps", "-aq", "--filter", `label=${label}`], {
    env: { ...process.env, ...(dockerHost === undefined ? {} : { DOCKER_HOST: dockerHost }) },
  })
  return stdout.trim()
}
