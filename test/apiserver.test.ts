import { execFile, execFileSync } from "node:child_process"
import { writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type Answer, call, eventually, script, serverProcesses } from "./server-process.ts"

// The REST API of `runnel server` as a client meets it: bin/runnel in its own process on a temp
// database, driven over HTTP with fetch (and kubectl against its /k8s).
const servers = serverProcesses("runnel-apiserver-test-")
const dir = servers.dir
afterAll(() => servers.cleanUp())

const kubectlAvailable = (() => {
  try {
    execFileSync("kubectl", ["version", "--client"], { stdio: "ignore" })
    return true
  } catch {
    console.warn("kubectl is not installed: the kubectl test of the API server is skipped")
    return false
  }
})()

const startServer = (args: readonly string[] = []) => servers.start(args)

const pipelineKeys = [
  "content",
  "content_type",
  "created_at",
  "driver",
  "driver_config",
  "has_webhook_secret",
  "id",
  "name",
  "paused",
  "rbac_expression",
  "updated_at",
]
const runKeys = [
  "args",
  "code",
  "created_at",
  "error_message",
  "finished_at",
  "id",
  "pipeline_id",
  "pipeline_name",
  "started_at",
  "status",
  "trigger_type",
  "triggered_by",
  "updated_at",
]

describe("the REST API of runnel server", () => {
  let base = ""
  let api: (method: string, path: string, body?: unknown, raw?: string) => Promise<Answer>
  const finished = (id: string) =>
    eventually(
      () => api("GET", `/api/runs/${id}`),
      (answer) => ["success", "failure", "error", "aborted"].includes(answer.body?.status),
      `run ${id} finishes`,
    )

  beforeAll(async () => {
    const server = await startServer(["--max-body-mb", "1"])
    base = server.url
    api = (method, path, body, raw) => call(base, method, path, body, raw)
  })

  it("stores a pipeline with PUT (201, then 200), shows it by name and by id, and never a webhook secret", async () => {
    const created = await api("PUT", "/api/pipelines/store-me", { content: script("echo one") })
    expect(created.status).toBe(201)
    expect(created.type).toMatch(/^application\/json/)
    expect(Object.keys(created.body).sort()).toEqual(pipelineKeys)
    expect(created.body).toMatchObject({
      name: "store-me",
      content_type: "ts",
      driver: "native",
      driver_config: {},
      rbac_expression: null,
      has_webhook_secret: false,
      paused: false,
    })
    const updated = await api("PUT", "/api/pipelines/store-me", {
      content: script("echo two"),
      content_type: "js",
      driver_config: { note: "x" },
      rbac_expression: '"admins" in Groups',
    })
    expect(updated.status).toBe(200)
    expect(updated.body).toMatchObject({ id: created.body.id, content_type: "js", driver_config: { note: "x" } })
    expect(updated.body.rbac_expression).toBe('"admins" in Groups')
    const byName = await api("GET", "/api/pipelines/store-me")
    const byId = await api("GET", `/api/pipelines/${created.body.id}`)
    expect(byName.body).toEqual(updated.body)
    expect(byId.body).toEqual(updated.body)
  })

  it("infers content_type yaml for a mapping with a jobs list, and accepts yml", async () => {
    const yaml =
      'jobs:\n  - name: build\n    plan:\n      - task: unit\n        config:\n          platform: linux\n          run: { path: "true" }\n'
    expect((await api("PUT", "/api/pipelines/yaml-one", { content: yaml })).body.content_type).toBe("yaml")
    expect(
      (await api("PUT", "/api/pipelines/yaml-two", { content: yaml, content_type: "yml" })).body.content_type,
    ).toBe("yaml")
    // YAML is validated as `fly set-pipeline` would: each problem with its path and line.
    const invalid = await api("PUT", "/api/pipelines/yaml-bad", { content: "a: 1\n", content_type: "yaml" })
    expect(invalid.status).toBe(400)
    expect(invalid.body.error).toBe("yaml-bad.yaml: the pipeline has no jobs; add jobs: with at least one job (line 1)")
    // Unknown top-level keys are ignored as atc/config.go ignores them, and the answer notes them.
    const anchored = await api("PUT", "/api/pipelines/yaml-anchors", { content: `shared: {x: 1}\n${yaml}` })
    expect(anchored.status).toBe(201)
    expect(anchored.body.notes).toEqual(['line 1: top-level key "shared" ignored, as Concourse ignores it'])
    expect(Object.keys((await api("GET", "/api/pipelines/yaml-anchors")).body).sort()).toEqual(pipelineKeys)
    // A mapping without jobs is a script, so it is compiled, and refused for lack of a pipeline export.
    const notYaml = await api("PUT", "/api/pipelines/not-yaml", { content: "a: 1\n" })
    expect(notYaml.status).toBe(400)
    expect(notYaml.body.error).toContain("not-yaml.ts does not export a pipeline function")
  })

  it("creates with POST (201) and refuses an existing name with 409", async () => {
    const created = await api("POST", "/api/pipelines", { name: "posted", content: script("true") })
    expect(created.status).toBe(201)
    expect(created.body.name).toBe("posted")
    const again = await api("POST", "/api/pipelines", { name: "posted", content: script("true") })
    expect(again.status).toBe(409)
    expect(again.body.error).toContain('pipeline "posted" already exists')
  })

  it("lists pipelines in pages", async () => {
    for (const name of ["page-a", "page-b", "page-c"])
      await api("PUT", `/api/pipelines/${name}`, { content: script("true") })
    const all = await api("GET", "/api/pipelines?per_page=100")
    const total = all.body.total_items
    expect(total).toBeGreaterThanOrEqual(3)
    const first = await api("GET", "/api/pipelines?per_page=2")
    expect(first.status).toBe(200)
    expect(first.body).toMatchObject({ page: 1, per_page: 2, total_items: total, total_pages: Math.ceil(total / 2) })
    expect(first.body.items).toHaveLength(2)
    expect(first.body.has_next).toBe(true)
    const last = await api("GET", `/api/pipelines?per_page=2&page=${Math.ceil(total / 2)}`)
    expect(last.body.has_next).toBe(false)
    for (const bad of ["page=0", "per_page=101", "per_page=x", "page=-1", "page=1&page=2"]) {
      const answer = await api("GET", `/api/pipelines?${bad}`)
      expect(answer.status, bad).toBe(400)
      expect(answer.body.error).toMatch(/is not valid; (page|per_page) is a whole number/)
    }
  })

  it("deletes a pipeline (204) with its runs; then it is a 404", async () => {
    await api("PUT", "/api/pipelines/doomed", { content: script("true") })
    const { body } = await api("POST", "/api/pipelines/doomed/trigger")
    await finished(body.run_id)
    expect((await api("DELETE", "/api/pipelines/doomed")).status).toBe(204)
    const gone = await api("GET", "/api/pipelines/doomed")
    expect(gone).toMatchObject({ status: 404, body: { error: 'pipeline "doomed" not found' } })
    expect((await api("DELETE", "/api/pipelines/doomed")).status).toBe(404)
    await eventually(
      () => api("GET", `/api/runs/${body.run_id}`),
      (answer) => answer.status === 404,
      "the run goes with its pipeline",
    )
  })

  it("refuses bad input with 400 and a message saying what is wrong", async () => {
    const cases: [string, string, unknown, string | undefined, RegExp][] = [
      ["PUT", "/api/pipelines/x1", undefined, "{not json", /not valid JSON/],
      ["PUT", "/api/pipelines/x1", undefined, "", /body is empty/],
      ["PUT", "/api/pipelines/x1", [1, 2], undefined, /must be a JSON object, not an array/],
      ["PUT", "/api/pipelines/x1", "text", undefined, /must be a JSON object/],
      ["PUT", "/api/pipelines/x1", {}, undefined, /"content" is required/],
      ["PUT", "/api/pipelines/x1", { content: 5 }, undefined, /"content" is required/],
      ["PUT", "/api/pipelines/x1", { content: "x", driver: 3 }, undefined, /"driver" must be a string/],
      [
        "PUT",
        "/api/pipelines/x1",
        { content: "x", driver_config: [] },
        undefined,
        /"driver_config" must be a JSON object/,
      ],
      [
        "PUT",
        "/api/pipelines/x1",
        { content: "x", rbac_expression: 1 },
        undefined,
        /"rbac_expression" must be a string/,
      ],
      ["PUT", "/api/pipelines/x1", { content: "x", content_type: "py" }, undefined, /"content_type" "py" is not known/],
      [
        "PUT",
        "/api/pipelines/x1",
        { content: "x", colour: "red" },
        undefined,
        /unknown field "colour"; known: content/,
      ],
      ["PUT", "/api/pipelines/x1", { content: "x", webhook_secret: 5 }, undefined, /"webhook_secret" must be a string/],
      [
        "PUT",
        "/api/pipelines/x1",
        { content: "x", secrets: { A: 1 } },
        undefined,
        /secret "A" must have a string value/,
      ],
      ["PUT", "/api/pipelines/Upper", { content: "x" }, undefined, /pipeline name "Upper" is not valid: use lowercase/],
      ["PUT", "/api/pipelines/-dash", { content: "x" }, undefined, /is not valid/],
      ["PUT", `/api/pipelines/${"a".repeat(64)}`, { content: "x" }, undefined, /at most 63 characters/],
      ["POST", "/api/pipelines", { content: "x" }, undefined, /"name" is required/],
      ["POST", "/api/pipelines", { name: "a_b", content: "x" }, undefined, /pipeline name "a_b" is not valid/],
      ["GET", "/api/runs?status=done", undefined, undefined, /\?status=done is not a run status; known: queued/],
    ]
    for (const [method, path, body, raw, message] of cases) {
      const answer = await api(method, path, body, raw)
      expect(answer.status, `${method} ${path} ${raw ?? JSON.stringify(body)}`).toBe(400)
      expect(answer.body.error).toMatch(message)
    }
    expect((await api("GET", "/api/pipelines/x1")).status).toBe(404)
  })

  it("refuses a driver not allowed, naming the allowed ones", async () => {
    const answer = await api("PUT", "/api/pipelines/odd-driver", { content: "x", driver: "podman" })
    expect(answer).toMatchObject({
      status: 400,
      body: { error: 'driver "podman" is not allowed on this server; allowed: docker, native, kubernetes' },
    })
  })

  it("answers an unknown route with a JSON 404, a wrong method with 405, and an oversize body with 413", async () => {
    const unknown = await api("GET", "/api/nothing-here")
    expect(unknown.status).toBe(404)
    expect(unknown.body.error).toMatch(/^no route for GET \/api\/nothing-here/)
    const wrong = await api("PATCH", "/api/pipelines")
    expect(wrong.status).toBe(405)
    expect(wrong.body.error).toMatch(/does not answer PATCH/)
    const huge = await api("PUT", "/api/pipelines/huge", { content: "x".repeat(1_100_000) })
    expect(huge.status).toBe(413)
    expect(huge.body.error).toMatch(/larger than 1048576 bytes; the server's --max-body-mb/)
    expect((await fetch(`${base}/health`)).status).toBe(200)
  })

  it("answers 404 for an unknown pipeline or run on every path", async () => {
    for (const [method, path] of [
      ["GET", "/api/pipelines/nope"],
      ["DELETE", "/api/pipelines/nope"],
      ["POST", "/api/pipelines/nope/pause"],
      ["POST", "/api/pipelines/nope/unpause"],
      ["POST", "/api/pipelines/nope/trigger"],
      ["GET", "/api/runs/nope"],
      ["GET", "/api/runs/nope/status"],
      ["GET", "/api/runs/nope/tasks"],
      ["POST", "/api/runs/nope/stop"],
    ] as const) {
      const answer = await api(method, path)
      expect(answer.status, `${method} ${path}`).toBe(404)
      expect(answer.body.error).toMatch(/^(pipeline|run) "nope" not found$/)
    }
  })

  it("triggers a run (202) that runs to success, with its tasks and their output", async () => {
    const pipeline = (await api("PUT", "/api/pipelines/greeter", { content: script("echo hello; echo oops >&2") })).body
    const trigger = await api("POST", `/api/pipelines/${pipeline.id}/trigger`, { mode: "args", args: ["a", "b"] })
    expect(trigger.status).toBe(202)
    expect(Object.keys(trigger.body)).toEqual(["run_id"])
    const id = trigger.body.run_id
    const run = await finished(id)
    expect(Object.keys(run.body).sort()).toEqual(runKeys)
    expect(run.body).toMatchObject({
      id,
      pipeline_id: pipeline.id,
      pipeline_name: "greeter",
      status: "success",
      code: 0,
      trigger_type: "args",
      triggered_by: "anonymous",
      args: ["a", "b"],
      error_message: null,
    })
    expect(run.body.started_at).not.toBeNull()
    expect(run.body.finished_at).not.toBeNull()
    expect((await api("GET", `/api/runs/${id}/status`)).body).toEqual(run.body)
    const tasks = await api("GET", `/api/runs/${id}/tasks`)
    expect(tasks.status).toBe(200)
    expect(tasks.body).toEqual([
      expect.objectContaining({
        path: "tasks/1/step",
        name: "step",
        status: "success",
        code: 0,
        stdout: "hello\n",
        stderr: "oops\n",
      }),
    ])
    expect(Object.keys(tasks.body[0]).sort()).toEqual([
      "code",
      "ended_at",
      "name",
      "path",
      "started_at",
      "status",
      "stderr",
      "stdout",
    ])
    const stop = await api("POST", `/api/runs/${id}/stop`)
    expect(stop.status).toBe(409)
    expect(stop.body.error).toMatch(/has already finished with status success/)

    const byPipeline = await api("GET", `/api/runs?pipeline_id=${pipeline.id}`)
    expect(byPipeline.body.items.map((r: { id: string }) => r.id)).toEqual([id])
    expect((await api("GET", "/api/runs?pipeline_id=greeter")).body.total_items).toBe(1)
    expect((await api("GET", `/api/runs?pipeline_id=${pipeline.id}&status=failure`)).body.total_items).toBe(0)
    expect((await api("GET", `/api/runs?pipeline_id=${pipeline.id}&status=success`)).body.total_items).toBe(1)
  })

  it("refuses triggers of a paused pipeline with 409 until it is unpaused", async () => {
    await api("PUT", "/api/pipelines/pausable", { content: script("true") })
    const paused = await api("POST", "/api/pipelines/pausable/pause")
    expect(paused).toMatchObject({ status: 200, body: { name: "pausable", paused: true } })
    const refused = await api("POST", "/api/pipelines/pausable/trigger")
    expect(refused.status).toBe(409)
    expect(refused.body.error).toMatch(/is paused; unpause it with POST \/api\/pipelines\/pausable\/unpause/)
    // A PUT keeps it paused: pausing is not part of the stored content.
    expect((await api("PUT", "/api/pipelines/pausable", { content: script("true") })).body.paused).toBe(true)
    expect((await api("POST", "/api/pipelines/pausable/unpause")).body.paused).toBe(false)
    const accepted = await api("POST", "/api/pipelines/pausable/trigger", { mode: "manual" })
    expect(accepted.status).toBe(202)
    expect((await finished(accepted.body.run_id)).body.trigger_type).toBe("manual")
  })

  it("refuses a webhook-mode trigger without a webhook secret (403), and unknown modes or bodies (400)", async () => {
    await api("PUT", "/api/pipelines/no-hook", { content: script("true") })
    const webhook = await api("POST", "/api/pipelines/no-hook/trigger", { mode: "webhook" })
    expect(webhook.status).toBe(403)
    expect(webhook.body.error).toMatch(/has no webhook_secret/)
    for (const [body, message] of [
      [{ mode: "cron" }, /"mode" "cron" is not a trigger mode; known: manual, args, webhook/],
      [{ args: "a" }, /"args" must be an array of strings/],
      [{ args: [1] }, /"args" must be an array of strings/],
      [{ when: "now" }, /unknown field "when"/],
      [[], /must be a JSON object/],
    ] as const) {
      const answer = await api("POST", "/api/pipelines/no-hook/trigger", body)
      expect(answer.status, JSON.stringify(body)).toBe(400)
      expect(answer.body.error).toMatch(message)
    }
  })

  it("lists the features and drivers", async () => {
    expect((await api("GET", "/api/features")).body).toEqual({
      features: ["webhooks", "secrets", "notifications", "fetch"],
    })
    expect((await api("GET", "/api/drivers")).body).toEqual({ drivers: ["docker", "native", "kubernetes"] })
  })
})

describe("the run queue of runnel server", () => {
  it("answers 503 when --max-queue-size runs are queued, and stops queued and running runs", async () => {
    const server = await startServer(["--max-in-flight", "1", "--max-queue-size", "1"])
    const api = (method: string, path: string, body?: unknown) => call(server.url, method, path, body)
    await api("PUT", "/api/pipelines/slow", { content: script("sleep 30") })
    const running = (await api("POST", "/api/pipelines/slow/trigger")).body.run_id
    await eventually(
      () => api("GET", `/api/runs/${running}`),
      (answer) => answer.body.status === "running",
      "the first run is running",
    )
    const queued = await api("POST", "/api/pipelines/slow/trigger")
    expect(queued.status).toBe(202)
    expect((await api("GET", `/api/runs/${queued.body.run_id}`)).body.status).toBe("queued")
    const full = await api("POST", "/api/pipelines/slow/trigger")
    expect(full.status).toBe(503)
    expect(full.body.error).toMatch(/the run queue is full \(1 queued runs, --max-queue-size 1\)/)
    expect((await api("GET", "/api/runs")).body.total_items).toBe(2)

    for (const id of [queued.body.run_id, running]) {
      const stopped = await api("POST", `/api/runs/${id}/stop`)
      expect(stopped.status).toBe(200)
      expect(stopped.body.id).toBe(id)
    }
    for (const id of [queued.body.run_id, running]) {
      const run = await eventually(
        () => api("GET", `/api/runs/${id}`),
        (answer) => answer.body.status === "aborted",
        `run ${id} is aborted`,
      )
      expect(run.body.status).toBe("aborted")
    }
    server.child.kill("SIGTERM")
  })
})

describe("pipelines applied with kubectl", () => {
  it.skipIf(!kubectlAvailable)("appear in GET /api/pipelines and run to success when triggered", async () => {
    const server = await startServer()
    const manifest = join(dir, "kubectl-pipeline.yaml")
    writeFileSync(
      manifest,
      `apiVersion: runnel.dev/v1alpha1
kind: Pipeline
metadata:
  name: applied
spec:
  content: ${JSON.stringify(script("echo applied"))}
`,
    )
    const output = await new Promise<string>((resolve, reject) =>
      execFile(
        "kubectl",
        ["--server", `${server.url}/k8s`, "--cache-dir", join(dir, "kube-cache"), "apply", "-f", manifest],
        { env: { ...process.env, KUBECONFIG: join(dir, "no-kubeconfig") }, timeout: 20_000 },
        (error, stdout, stderr) => (error === null ? resolve(stdout) : reject(new Error(stderr))),
      ),
    )
    expect(output).toContain("pipeline.runnel.dev/applied created")
    const list = await call(server.url, "GET", "/api/pipelines")
    expect(list.body.items).toEqual([
      expect.objectContaining({ name: "applied", content_type: "ts", driver: "native", paused: false }),
    ])
    const trigger = await call(server.url, "POST", "/api/pipelines/applied/trigger")
    expect(trigger.status).toBe(202)
    const run = await eventually(
      () => call(server.url, "GET", `/api/runs/${trigger.body.run_id}`),
      (answer) => answer.body.status === "success",
      "the triggered run succeeds",
    )
    expect(run.body).toMatchObject({ pipeline_name: "applied", pipeline_id: list.body.items[0].id, code: 0 })
    const tasks = await call(server.url, "GET", `/api/runs/${trigger.body.run_id}/tasks`)
    expect(tasks.body[0].stdout).toBe("applied\n")
    server.child.kill("SIGTERM")
  })

  it.skipIf(!kubectlAvailable)("are audited with the actor kubernetes: apply, patch paused, delete", async () => {
    const server = await startServer()
    const kubectl = (...args: string[]) =>
      new Promise<string>((resolve, reject) =>
        execFile(
          "kubectl",
          ["--server", `${server.url}/k8s`, "--cache-dir", join(dir, "kube-cache"), ...args],
          { env: { ...process.env, KUBECONFIG: join(dir, "no-kubeconfig") }, timeout: 20_000 },
          (error, stdout, stderr) => (error === null ? resolve(stdout) : reject(new Error(stderr))),
        ),
      )
    const audited = () =>
      server
        .stdout()
        .split("\n")
        .filter((line) => line.startsWith("{"))
        .map((line) => JSON.parse(line))
        .filter((entry) => entry.kind === "audit" && entry.pipeline === "kubectl-made")
    const manifest = join(dir, "kubectl-audited.yaml")
    writeFileSync(
      manifest,
      `apiVersion: runnel.dev/v1alpha1\nkind: Pipeline\nmetadata:\n  name: kubectl-made\nspec:\n  content: ${JSON.stringify(script("true"))}\n`,
    )
    await kubectl("apply", "-f", manifest)
    await kubectl("patch", "pipelines.runnel.dev", "kubectl-made", "--type", "merge", "-p", '{"spec":{"paused":true}}')
    // A change through the REST API in between is audited once, as the API's, not again as kubectl's.
    expect((await call(server.url, "POST", "/api/pipelines/kubectl-made/unpause")).status).toBe(200)
    await kubectl("delete", "pipelines.runnel.dev", "kubectl-made")
    const entries = await eventually(
      async () => audited(),
      (found) => found.length >= 4,
      "four audit entries",
    )
    const id = (entries[0] as { pipeline_id: string }).pipeline_id
    expect(entries.map(({ msg, actor }) => [msg, actor])).toEqual([
      ["pipeline.upsert", "kubernetes"],
      ["pipeline.paused", "kubernetes"],
      ["pipeline.unpaused", "anonymous"],
      ["pipeline.delete", "kubernetes"],
    ])
    for (const entry of entries) expect(entry).toMatchObject({ pipeline: "kubectl-made", pipeline_id: id })
    server.child.kill("SIGTERM")
  })
})
