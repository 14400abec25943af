import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { bareToolCall, call, eventually, type ServerProcess, serverProcesses } from "./server-process.ts"

// MCP as an assistant meets it: a real `runnel server` process, driven by the official SDK client
// over Streamable HTTP, and by plain fetch for a bare tools/call and malformed requests.
const servers = serverProcesses("runnel-mcp-test-")
afterAll(() => servers.cleanUp())

const tokenValue = "tok-5e1c9a7d33b2"
const noisyLines = 3000
/** Prints the secret (redacted on the way), a long log, and fails with a recognisable error. */
const failingDeploy = `export const pipeline = async () => {
  const build = await runtime.run({
    name: "build",
    image: "busybox",
    command: { path: "sh", args: ["-c", "echo token=$TOKEN; i=0; while [ $i -lt ${noisyLines} ]; do echo compiling module $i; i=$((i+1)); done; echo 'dial tcp 10.0.0.7:5432: connection refused' >&2; exit 3"] },
    env: { TOKEN: "secret:API_TOKEN" },
  })
  if (build.code !== 0) throw new Error("build failed with code " + build.code)
}
`
const waits = `export const pipeline = async () => {
  await runtime.run({ name: "wait", image: "busybox", command: { path: "sh", args: ["-c", "sleep 30"] } })
}
`

type ToolAnswer = { isError: boolean; text: string; json: unknown }

describe("MCP at POST /mcp", () => {
  let server: ServerProcess
  let client: Client
  /** Every text any tool answered, for the redaction check. */
  const answered: string[] = []
  const tool = async (name: string, args: Record<string, unknown> = {}): Promise<ToolAnswer> => {
    const result = await client.callTool({ name, arguments: args })
    const content = result.content as { type: string; text: string }[]
    expect(content).toHaveLength(1)
    expect(content[0]?.type).toBe("text")
    const text = content[0]?.text ?? ""
    answered.push(text)
    let json: unknown
    try {
      json = JSON.parse(text)
    } catch {
      json = undefined
    }
    return { isError: result.isError === true, text, json }
  }
  // biome-ignore lint/suspicious/noExplicitAny: tool answers are read field by field.
  const ok = async (name: string, args: Record<string, unknown> = {}): Promise<any> => {
    const answer = await tool(name, args)
    expect(answer.isError, answer.text).toBe(false)
    return answer.json
  }
  let runId = ""

  beforeAll(async () => {
    server = await servers.start(["--mcp-allow-actions"])
    client = new Client({ name: "runnel-test", version: "1.0.0" })
    await client.connect(new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`)))
    const put = await call(server.url, "PUT", "/api/pipelines/deploy", {
      content: failingDeploy,
      secrets: { API_TOKEN: tokenValue },
    })
    expect(put.status).toBe(201)
    expect((await call(server.url, "PUT", "/api/pipelines/waits", { content: waits })).status).toBe(201)
    runId = (await call(server.url, "POST", "/api/pipelines/deploy/trigger")).body.run_id
    await eventually(
      () => call(server.url, "GET", `/api/runs/${runId}`),
      (answer) => answer.body?.status === "failure",
      `run ${runId} fails`,
    )
  }, 60_000)
  afterAll(async () => {
    await client?.close()
    // The secret went in, and no tool answer carried a byte of it out.
    expect(answered.length).toBeGreaterThan(20)
    for (const text of answered) expect(text).not.toContain(tokenValue)
  })

  it("lists its tools with descriptions and input schemas, actions included under --mcp-allow-actions", async () => {
    const { tools } = await client.listTools()
    expect(tools.map((t) => t.name).sort()).toEqual(
      [
        "get_pipeline",
        "get_run",
        "get_run_task",
        "get_task_output",
        "list_pipelines",
        "list_run_tasks",
        "list_runs",
        "search_pipelines",
        "search_tasks",
        "stop_run",
        "trigger_pipeline",
      ].sort(),
    )
    for (const t of tools) {
      expect(t.description?.length, t.name).toBeGreaterThan(60)
      expect(t.inputSchema.type).toBe("object")
    }
    const getRunTask = tools.find((t) => t.name === "get_run_task")
    expect(Object.keys(getRunTask?.inputSchema.properties ?? {}).sort()).toEqual(["limit", "offset", "path", "run_id"])
  })

  it("shows a run and its tasks exactly as REST does, output redacted", async () => {
    expect(await ok("get_run", { run_id: runId })).toEqual((await call(server.url, "GET", `/api/runs/${runId}`)).body)
    const rest = (await call(server.url, "GET", `/api/runs/${runId}/tasks`)).body
    const tasks = await ok("list_run_tasks", { run_id: runId })
    expect(tasks.map((t: { path: string }) => t.path)).toEqual(rest.map((t: { path: string }) => t.path))
    const build = tasks.find((t: { name: string }) => t.name === "build")
    const restBuild = rest.find((t: { name: string }) => t.name === "build")
    expect(build).toMatchObject({ status: "failure", code: 3, stdout_total_chars: restBuild.stdout.length })
    expect(restBuild.stdout.endsWith(build.stdout)).toBe(true)
    expect(restBuild.stdout).toContain("token=***REDACTED***")

    const whole = await ok("get_run_task", { run_id: runId, path: build.path })
    expect(whole).toMatchObject({ ...restBuild, next_offset: null, offset: 0 })
  })

  it("pages a long task output in characters with the total and the next offset", async () => {
    const rest = (await call(server.url, "GET", `/api/runs/${runId}/tasks`)).body
    const build = rest.find((t: { name: string }) => t.name === "build")
    let read = ""
    let offset: number | null = 0
    let pages = 0
    while (offset !== null) {
      const page = await ok("get_run_task", { run_id: runId, path: build.path, offset, limit: 10_000 })
      expect(page.stdout_total_chars).toBe(build.stdout.length)
      expect(page.stdout.length).toBeLessThanOrEqual(10_000)
      read += page.stdout
      offset = page.next_offset
      pages++
    }
    expect(pages).toBe(Math.ceil(build.stdout.length / 10_000))
    expect(read).toBe(build.stdout)
  })

  it("finds output by words, ranked, with a snippet, in one run, one pipeline or everywhere", async () => {
    const everywhere = await eventually(
      () => ok("search_tasks", { query: "connection refused" }),
      (answer) => answer.items.length > 0,
      "the run's output is searchable",
      10_000,
    )
    expect(everywhere.items[0]).toMatchObject({
      run_id: runId,
      pipeline_name: "deploy",
      path: "tasks/1/build",
      stream: "stderr",
      snippet: expect.stringContaining("«connection» «refused»"),
    })
    expect((await ok("search_tasks", { query: "refused", run_id: runId })).items).toHaveLength(1)
    const inPipeline = await ok("search_tasks", { query: "failure", pipeline_id: "deploy" })
    expect(inPipeline.runs.map((run: { id: string }) => run.id)).toContain(runId)
    const paged = await ok("search_tasks", { query: "compiling module", per_page: 1 })
    expect(paged).toMatchObject({ page: 1, per_page: 1, has_next: true })
    expect(paged.items).toHaveLength(1)
    expect((await ok("search_tasks", { query: "compiling module", per_page: 1, page: 2 })).items).toHaveLength(1)
    // Search syntax is only separators: never an error, never an injection.
    for (const query of [
      '"refused',
      "refused AND (",
      "stderr:refused",
      "* NEAR( ^refused",
      "'; DROP TABLE chunks; --",
    ]) {
      const answer = await tool("search_tasks", { query })
      expect(answer.isError, query).toBe(false)
    }
    expect((await ok("search_tasks", { query: "!!! ((( ***" })).items).toEqual([])
    // The secret was stored redacted: neither search nor grep can find it.
    expect((await ok("search_tasks", { query: tokenValue })).items).toEqual([])
    expect((await ok("search_tasks", { query: "REDACTED" })).items[0].snippet).toContain("token=***«REDACTED»***")
    const grep = await ok("get_task_output", { run_id: runId, path: "tasks/1/build", pattern: tokenValue })
    expect(grep.stdout.matches).toEqual([])
    expect((await ok("search_tasks", { query: "refused" })).items.length).toBeGreaterThan(0)
  })

  it("a written line becomes searchable within a few seconds", async () => {
    const word = `marker${Date.now().toString(36)}`
    await call(server.url, "PUT", "/api/pipelines/marker", {
      content: `export const pipeline = async () => { console.log("${word}") }\n`,
    })
    const started = Date.now()
    await call(server.url, "POST", "/api/pipelines/marker/trigger")
    await eventually(
      () => ok("search_tasks", { query: word }),
      (answer) => answer.items.length === 1,
      `${word} is found`,
      10_000,
    )
    expect(Date.now() - started).toBeLessThan(10_000)
  })

  it("lists and finds pipelines and runs, with the source and filters an assistant needs", async () => {
    expect((await ok("search_pipelines", {})).items.map((p: { name: string }) => p.name)).toEqual(
      expect.arrayContaining(["deploy", "waits"]),
    )
    const found = await ok("search_pipelines", { query: "connection REFUSED" })
    expect(found.items).toEqual([{ id: expect.any(String), name: "deploy", driver: "native" }])
    const listed = await ok("list_pipelines")
    expect(listed.items).toEqual((await call(server.url, "GET", "/api/pipelines")).body.items)
    expect(await ok("get_pipeline", { pipeline: "deploy" })).toEqual(
      (await call(server.url, "GET", "/api/pipelines/deploy")).body,
    )
    const failures = await ok("list_runs", { pipeline: "deploy", status: "failure" })
    expect(failures.items.map((run: { id: string }) => run.id)).toEqual([runId])
    expect((await ok("list_runs", { since: "2999-01-01T00:00:00Z" })).items).toEqual([])
    expect((await ok("list_runs", { status: "success", pipeline: "deploy" })).items).toEqual([])
  })

  it("greps one task's output with line numbers and context", async () => {
    const grep = await ok("get_task_output", {
      run_id: runId,
      path: "tasks/1/build",
      pattern: "MODULE 1500",
      context: 1,
    })
    expect(grep.stdout.matches).toEqual([
      {
        line: 1502,
        text: "compiling module 1500",
        before: ["compiling module 1499"],
        after: ["compiling module 1501"],
      },
    ])
    expect(grep.stderr.matches).toEqual([])
    const capped = await ok("get_task_output", {
      run_id: runId,
      path: "tasks/1/build",
      pattern: "module",
      max_matches: 5,
    })
    expect(capped.stdout).toMatchObject({ truncated: true })
    expect(capped.stdout.matches).toHaveLength(5)
  })

  it("triggers and stops runs when actions are allowed, auditing the actor", async () => {
    const { run_id } = await ok("trigger_pipeline", { pipeline: "waits" })
    await eventually(
      () => ok("get_run", { run_id }),
      (run) => run.status === "running",
      "the run starts",
    )
    expect(await ok("stop_run", { run_id })).toMatchObject({ id: run_id })
    await eventually(
      () => ok("get_run", { run_id }),
      (run) => run.status === "aborted",
      "the run is aborted",
    )
    const audit = server
      .stdout()
      .split("\n")
      .filter((line) => line.includes('"kind":"audit"') && line.includes(run_id))
      .map((line) => JSON.parse(line))
    expect(audit).toEqual([
      expect.objectContaining({ msg: "run.trigger", pipeline: "waits", actor: "anonymous", via: "mcp", run: run_id }),
      expect.objectContaining({ msg: "run.stop", pipeline: "waits", actor: "anonymous", via: "mcp", run: run_id }),
    ])
    const again = await tool("stop_run", { run_id })
    expect(again.isError).toBe(true)
    expect(again.text).toContain("already finished")
  })

  it("answers bad arguments and unknown names with tool errors a model can act on", async () => {
    const cases: [string, Record<string, unknown>, string][] = [
      ["get_run", {}, "run_id"],
      ["get_run", { run_id: 42 }, "run_id"],
      ["get_run", { run_id: "run-nope" }, 'run \\"run-nope\\" not found'],
      ["get_run", { run_id: "Not A Name!" }, "not found"],
      ["get_run_task", { run_id: runId, path: "tasks/9/nope" }, "list_run_tasks"],
      ["get_run_task", { run_id: runId, path: "tasks/1/build", limit: 0 }, "limit"],
      ["get_pipeline", { pipeline: "missing" }, "list_pipelines"],
      ["search_tasks", { query: "x".repeat(10_000) }, "query"],
      ["search_tasks", { query: "x", run_id: runId, pipeline_id: "deploy" }, "not both"],
      ["list_runs", { status: "sideways" }, "status"],
      ["list_runs", { since: "yesterday" }, "since"],
    ]
    for (const [name, args, hint] of cases) {
      const answer = await tool(name, args)
      expect(answer.isError, `${name} ${JSON.stringify(args).slice(0, 80)}`).toBe(true)
      expect(answer.text).toContain(hint)
    }
  })
})

describe("MCP over plain HTTP", () => {
  let base = ""
  beforeAll(async () => {
    base = (await servers.start()).url
  }, 30_000)
  const post = (body: string, headers: Record<string, string> = {}) =>
    fetch(`${base}/mcp`, { method: "POST", headers: { "Content-Type": "application/json", ...headers }, body })

  it("answers a bare tools/call without initialize, in JSON", async () => {
    const response = await bareToolCall(base, "search_pipelines", {}, 7)
    expect(response.status).toBe(200)
    expect(response.headers.get("content-type")).toMatch(/^application\/json/)
    expect(response.headers.get("mcp-session-id")).toBeNull()
    // biome-ignore lint/suspicious/noExplicitAny: read field by field.
    const body: any = await response.json()
    expect(body).toMatchObject({ jsonrpc: "2.0", id: 7, result: { content: [{ type: "text" }] } })
    expect(JSON.parse(body.result.content[0].text)).toMatchObject({ items: [], total_items: 0 })
  })

  it("streams the answer as SSE when the client asks only for event streams", async () => {
    const response = await post(
      JSON.stringify({
        jsonrpc: "2.0",
        id: 1,
        method: "tools/call",
        params: { name: "list_pipelines", arguments: {} },
      }),
      { Accept: "text/event-stream" },
    )
    expect(response.headers.get("content-type")).toMatch(/^text\/event-stream/)
    expect(await response.text()).toMatch(/^event: message\ndata: \{.*"id":1/m)
  })

  it("answers GET and DELETE with 405, as a stateless server does", async () => {
    for (const method of ["GET", "DELETE"]) {
      const response = await fetch(`${base}/mcp`, { method })
      expect(response.status).toBe(405)
      expect(response.headers.get("allow")).toBe("POST")
      expect(((await response.json()) as { error: { message: string } }).error.message).toContain("POST only")
    }
  })

  it("answers malformed requests with JSON-RPC errors, never a 500", async () => {
    const cases: [string, number, RegExp][] = [
      ["not json", -32700, /not JSON/],
      ["", -32700, /not JSON/],
      [JSON.stringify([{ jsonrpc: "2.0", id: 1, method: "tools/list" }]), -32600, /batches are not supported/],
      [
        JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "drop_tables" } }),
        -32602,
        /unknown tool "drop_tables"; the tools are: get_run/,
      ],
      [
        JSON.stringify({
          jsonrpc: "2.0",
          id: 3,
          method: "tools/call",
          params: { name: "trigger_pipeline", arguments: {} },
        }),
        -32602,
        /unknown tool/,
      ],
      [JSON.stringify({ hello: "world" }), -32700, /JSON-RPC/],
      [JSON.stringify({ jsonrpc: "2.0", id: 4, method: "no/such/method" }), -32601, /not found/i],
    ]
    for (const [body, code, message] of cases) {
      const response = await post(body)
      expect(response.status, body.slice(0, 60)).toBeLessThan(500)
      const answer = (await response.json()) as { error: unknown }
      expect(answer.error, body.slice(0, 60)).toMatchObject({ code, message: expect.stringMatching(message) })
    }
  })
})
