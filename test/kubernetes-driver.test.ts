import { readFile } from "node:fs/promises"
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

describeDocker("examples on runnel server --driver kubernetes", () => {
  const servers = serverProcesses("runnel-kubernetes-driver-")
  let server: ServerProcess
  beforeAll(async () => {
    if (dockerHost !== undefined) process.env.DOCKER_HOST = dockerHost
    server = await servers.start(["--driver", "kubernetes", "--secret", `GREETING=${secret}`])
  })
  afterAll(() => servers.cleanUp())

  const api = (method: string, path: string, body?: unknown): Promise<Answer> => call(server.url, method, path, body)

  async function store(name: string, file: string, contentType: "typescript" | "yaml") {
    const content = await readFile(`${root}/examples/${file}`, "utf8")
    const answer = await api("PUT", `/api/pipelines/${name}`, { content, content_type: contentType })
    expect(answer.status, JSON.stringify(answer.body)).toBe(201)
    expect(answer.body.driver).toBe("kubernetes")
  }

  type Task = { path: string; status: string; code: number | null; stdout: string; stderr: string }
  const outputOf = (tasks: Task[]) => tasks.map((task) => task.stdout).join("")

  it.each([
    ["hello", "hello.ts", "success", "hello from runnel\n"],
    ["parallel", "parallel.ts", "success", "three\n"],
    ["shared-volume", "shared-volume.ts", "success", ""],
    ["failing-task", "failing-task.ts", "success", ""],
    ["throwing", "throwing.ts", "failure", "1.4.0-dev"],
  ])("runs %s as Pods, ending %s", async (name, file, status, output) => {
    await store(name, file, "typescript")
    const { run, tasks } = await runToEnd(server.url, name, 120_000)
    expect(run.status, JSON.stringify(run)).toBe(status)
    expect(outputOf(tasks)).toContain(output)
  })

  it("runs a failing task as a failure with its exit code", async () => {
    await store("failing-code", "failing-task.ts", "typescript")
    const { tasks } = await runToEnd(server.url, "failing-code", 120_000)
    expect(tasks.map((task: Task) => [task.status, task.code])).toContainEqual(["failure", 3])
  })

  it("passes a secret to a task through a Secret, never through the Pod, and redacts it", async () => {
    await store("env-and-secrets", "env-and-args.ts", "typescript")
    const trigger = await api("POST", "/api/pipelines/env-and-secrets/trigger")
    const runId = trigger.body.run_id
    // While it runs, no Pod of the run carries the value.
    const pods = await kubectl(server, "get", "pods", "-l", `runnel.dev/run=${runId}`, "-o", "json")
    expect(pods).not.toContain(secret)
    const run = await eventually(
      () => api("GET", `/api/runs/${runId}`),
      (answer) => ["success", "failure", "error"].includes(answer.body.status),
      "the run finishes",
      120_000,
    )
    expect(run.body.status).toBe("success")
    const tasks: Task[] = (await api("GET", `/api/runs/${runId}/tasks`)).body
    expect(outputOf(tasks)).toContain("greeting: ***REDACTED***\n")
    expect(JSON.stringify(tasks)).not.toContain(secret)
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
