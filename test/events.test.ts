import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { call, type Event, erroringYaml, eventually, type Json, readEvents, serverProcesses } from "./server-process.ts"

// Streamed run output (GET /api/runs/:id/events, POST /api/pipelines/:name/run) of `runnel server`
// in its own process on a temp database, read over HTTP as a page or the CLI would.
const servers = serverProcesses("runnel-events-test-")
afterAll(() => servers.cleanUp())
const startServer = async (args: readonly string[] = []) => (await servers.start(args)).url

const script = (shell: string, env?: Record<string, string>) =>
  `export const pipeline = async () => {\n  await runtime.run({ name: "step", image: "busybox", command: { path: "sh", args: ["-c", ${JSON.stringify(shell)}] }${env === undefined ? "" : `, env: ${JSON.stringify(env)}`} })\n}\n`

const numbered = (n: number) => Array.from({ length: n }, (_, i) => `line ${i + 1}\n`).join("")
const stdoutOf = (events: Event[]) =>
  events
    .filter((event) => event.data.stream === "stdout")
    .map((event) => event.data.data)
    .join("")

/** Output events carry increasing ids; the stream ends with exactly one exit event, last. */
function expectWellFormed(events: Event[], runId: string): Json {
  const output = events.filter((event) => event.data.stream !== undefined)
  const ids = output.map((event) => event.id ?? 0)
  for (let i = 1; i < ids.length; i++) expect(ids[i]).toBeGreaterThan(ids[i - 1] ?? 0)
  expect(events.filter((event) => event.data.event === "exit")).toHaveLength(1)
  const exit = events.at(-1)?.data
  expect(exit).toMatchObject({ event: "exit", run_id: runId })
  return exit
}

describe("run events over SSE", () => {
  let base = ""
  beforeAll(async () => {
    base = await startServer()
    const put = async (name: string, content: string) =>
      expect((await call(base, "PUT", `/api/pipelines/${name}`, { content })).status).toBe(201)
    await put("numbered", script("for i in $(seq 1 200); do echo line $i; sleep 0.01; done"))
    await put("quick", script("echo hello; echo to-stderr >&2"))
    await put(
      "failing",
      script("echo about to fail; exit 3").replace(/\}\n$/, '  throw new Error("the step failed")\n}\n'),
    )
    await put("secretive", script("echo never", { TOKEN: "secret:MISSING_TOKEN" }))
    await put("slow", script("for i in $(seq 1 40); do echo line $i; sleep 0.05; done"))
    await put("yaml-error", erroringYaml)
  }, 30_000)

  it("attached mid-run, gives every output line once and in order, then the exit event; Last-Event-ID resumes", async () => {
    const { body } = await call(base, "POST", "/api/pipelines/numbered/trigger", {})
    const runId: string = body.run_id
    // Attach once some output is stored and the run is still going.
    await eventually(
      () => call(base, "GET", `/api/runs/${runId}/tasks`),
      (answer) => /line 20\n/.test(answer.body[0]?.stdout ?? ""),
      "the run has printed 20 lines",
    )
    const attachedAt = Date.now()
    const events = await readEvents(await fetch(`${base}/api/runs/${runId}/events`))
    const exit = expectWellFormed(events, runId)
    expect(exit.code).toBe(0)
    expect(stdoutOf(events)).toBe(numbered(200))
    expect(Date.now() - attachedAt).toBeGreaterThan(500) // it followed live output, not only the stored history
    expect((await call(base, "GET", `/api/runs/${runId}`)).body.status).toBe("success")

    const output = events.filter((event) => event.data.stream !== undefined)
    expect(output.length).toBeGreaterThan(2)
    const cut = Math.floor(output.length / 2)
    const resumed = await readEvents(
      await fetch(`${base}/api/runs/${runId}/events`, { headers: { "Last-Event-ID": String(output[cut - 1]?.id) } }),
    )
    expectWellFormed(resumed, runId)
    expect(resumed.slice(0, -1)).toEqual(output.slice(cut))

    // After the run, a reader is served from storage: the same events.
    expect(await readEvents(await fetch(`${base}/api/runs/${runId}/events`))).toEqual(events)
  }, 60_000)

  it("POST /api/pipelines/:name/run creates a run and streams its stdout and stderr to exit code 0", async () => {
    const events = await readEvents(await fetch(`${base}/api/pipelines/quick/run`, { method: "POST" }))
    const runId = events.at(-1)?.data.run_id
    expect(expectWellFormed(events, runId).code).toBe(0)
    expect(stdoutOf(events)).toBe("hello\n")
    expect(events.filter((event) => event.data.stream === "stderr").map((event) => event.data.data)).toEqual([
      "to-stderr\n",
    ])
    const run = (await call(base, "GET", `/api/runs/${runId}`)).body
    expect(run).toMatchObject({ status: "success", trigger_type: "manual", pipeline_name: "quick" })

    const withArgs = await readEvents(
      await fetch(`${base}/api/pipelines/quick/run`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ args: ["a", "b"] }),
      }),
    )
    const argsRun = (await call(base, "GET", `/api/runs/${withArgs.at(-1)?.data.run_id}`)).body
    expect(argsRun).toMatchObject({ status: "success", trigger_type: "args", args: ["a", "b"] })
  }, 30_000)

  it("ends a failing run with its non-zero exit code and no error event", async () => {
    const events = await readEvents(await fetch(`${base}/api/pipelines/failing/run`, { method: "POST" }))
    const exit = expectWellFormed(events, events.at(-1)?.data.run_id)
    expect(exit.code).not.toBe(0)
    expect(stdoutOf(events)).toBe("about to fail\n")
    expect(events.some((event) => event.data.event === "error")).toBe(false)
  }, 30_000)

  it("sends an error event naming the missing secret just before the exit of an error run", async () => {
    const events = await readEvents(await fetch(`${base}/api/pipelines/secretive/run`, { method: "POST" }))
    const exit = expectWellFormed(events, events.at(-1)?.data.run_id)
    expect(exit.code).not.toBe(0)
    const error = events.at(-2)?.data
    expect(error).toMatchObject({ event: "error" })
    expect(error.message).toMatch(/MISSING_TOKEN/)
    expect(events.filter((event) => event.data.event === "error")).toHaveLength(1)
  }, 30_000)

  it("ends a YAML run in status error with code 2: in Run.status.code, the run's code and the exit event", async () => {
    const events = await readEvents(await fetch(`${base}/api/pipelines/yaml-error/run`, { method: "POST" }))
    const runId = events.at(-1)?.data.run_id
    expect(expectWellFormed(events, runId).code).toBe(2)
    expect(events.at(-2)?.data).toMatchObject({ event: "error", message: expect.stringContaining("((nope))") })
    // The Run resource itself, from the embedded Kubernetes API of the same server.
    const resource = await call(base, "GET", `/k8s/apis/runnel.dev/v1alpha1/namespaces/default/runs/${runId}`)
    expect(resource.body.status).toMatchObject({ phase: "error", code: 2 })
    expect((await call(base, "GET", `/api/runs/${runId}`)).body).toMatchObject({ status: "error", code: 2 })
  }, 30_000)

  it("lets a client leave without stopping the run", async () => {
    const first = await readEvents(await fetch(`${base}/api/pipelines/slow/run`, { method: "POST" }), 1)
    expect(first[0]?.data.stream).toBe("stdout")
    const runs = (await call(base, "GET", "/api/runs?pipeline_id=slow")).body.items
    expect(runs).toHaveLength(1)
    const runId = runs[0].id
    const done = await eventually(
      () => call(base, "GET", `/api/runs/${runId}`),
      (answer) => answer.body.status !== "running" && answer.body.status !== "queued",
      "the run has finished",
    )
    expect(done.body.status).toBe("success")
    const tasks = (await call(base, "GET", `/api/runs/${runId}/tasks`)).body
    expect(tasks[0].stdout).toBe(numbered(40))
  }, 30_000)

  it("answers JSON errors before any stream starts", async () => {
    const cases: [string, string, unknown, Record<string, string>, number, RegExp][] = [
      ["GET", "/api/runs/run-nope/events", undefined, {}, 404, /run "run-nope" not found/],
      ["GET", "/api/runs/NOT_A_NAME/events", undefined, {}, 404, /not found/],
      ["POST", "/api/pipelines/nope/run", undefined, {}, 404, /pipeline "nope" not found/],
      ["POST", "/api/pipelines/quick/run", { args: "x" }, {}, 400, /"args" must be an array of strings/],
      ["POST", "/api/pipelines/quick/run", { mode: "manual" }, {}, 400, /mode/],
    ]
    for (const [method, path, body, headers, status, error] of cases) {
      const answer = await fetch(`${base}${path}`, {
        method,
        headers: { ...headers, ...(body === undefined ? {} : { "Content-Type": "application/json" }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      })
      expect([path, answer.status]).toEqual([path, status])
      expect(answer.headers.get("content-type")).toMatch(/json/)
      expect(((await answer.json()) as Json).error).toMatch(error)
    }
    const run = (await call(base, "GET", "/api/runs?pipeline_id=quick")).body.items[0].id
    const badId = await fetch(`${base}/api/runs/${run}/events`, { headers: { "Last-Event-ID": "abc" } })
    expect(badId.status).toBe(400)
    expect(((await badId.json()) as Json).error).toMatch(/Last-Event-ID/)

    expect((await call(base, "POST", "/api/pipelines/quick/pause")).status).toBe(200)
    const paused = await call(base, "POST", "/api/pipelines/quick/run")
    expect(paused.status).toBe(409)
    expect(paused.body.error).toMatch(/paused/)
    expect((await call(base, "POST", "/api/pipelines/quick/unpause")).status).toBe(200)
  }, 30_000)
})

describe("POST /api/pipelines/:name/run with a full queue", () => {
  it("answers 503 as JSON and creates nothing", async () => {
    const base = await startServer(["--max-in-flight", "1", "--max-queue-size", "1"])
    const content = script("sleep 1; echo done")
    expect((await call(base, "PUT", "/api/pipelines/busy", { content })).status).toBe(201)
    const first = (await call(base, "POST", "/api/pipelines/busy/trigger", {})).body.run_id
    await eventually(
      () => call(base, "GET", `/api/runs/${first}`),
      (answer) => answer.body.status === "running",
      "the first run is running",
    )
    expect((await call(base, "POST", "/api/pipelines/busy/trigger", {})).status).toBe(202)
    const full = await call(base, "POST", "/api/pipelines/busy/run")
    expect(full.status).toBe(503)
    expect(full.body.error).toMatch(/queue is full/)
    expect((await call(base, "GET", "/api/runs?pipeline_id=busy")).body.total_items).toBe(2)
  }, 30_000)
})
