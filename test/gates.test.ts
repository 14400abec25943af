import { spawn } from "node:child_process"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { root, runnel, runnelBin } from "./cli.ts"
import { mcpClient } from "./mcp-client.ts"
import {
  type Answer,
  bareToolCall,
  call,
  eventually,
  type Json,
  kubectl,
  type ServerProcess,
  serverProcesses,
} from "./server-process.ts"

// Approval gates (issue 15) through a real `runnel server` in its own process, the native driver,
// over HTTP as a person would use them: a script waits, a person approves, rejects, or lets it expire.
const servers = serverProcesses("runnel-gates-test-")
afterAll(() => servers.cleanUp())

const gatesOn = ["--allowed-features", "*,gates"]
const finalStatuses = ["success", "failure", "error", "aborted"]

const task = (name: string, shell: string) =>
  `await runtime.run({ name: ${JSON.stringify(name)}, image: "busybox", command: { path: "sh", args: ["-c", ${JSON.stringify(shell)}] } })`

/** A script that runs a task, waits on gate `deploy`, then runs another task; `gate` is the gate call's options. */
const gated = (gate: string) => `export const pipeline = async () => {
  ${task("build", "echo built")}
  const approval = await pipeline.gate(${gate})
  console.log("continuing after", approval.approvedBy, approval.comment)
  ${task("deploy", "echo deployed")}
}
`

function apiOf(server: ServerProcess) {
  return (method: string, path: string, body?: unknown, raw?: string) => call(server.url, method, path, body, raw)
}

type Api = ReturnType<typeof apiOf>

async function trigger(api: Api, pipeline: string, content: string): Promise<string> {
  const stored = await api("PUT", `/api/pipelines/${pipeline}`, { content })
  expect([200, 201]).toContain(stored.status)
  const started = await api("POST", `/api/pipelines/${pipeline}/trigger`)
  expect(started.status).toBe(202)
  return started.body.run_id
}

/** The run's gates once it has `count` of them, the last one `status`. */
async function gatesOf(api: Api, runId: string, count = 1, status = "pending") {
  const answer = await eventually(
    () => api("GET", `/api/runs/${runId}/gates`),
    (got: Answer) => got.status === 200 && got.body.length === count && got.body[count - 1].status === status,
    `run ${runId} has ${count} gate(s), the last ${status}`,
  )
  return answer.body
}

const finished = (api: Api, runId: string, timeoutMs = 30_000) =>
  eventually(
    () => api("GET", `/api/runs/${runId}`),
    (got: Answer) => finalStatuses.includes(got.body.status),
    `run ${runId} finishes`,
    timeoutMs,
  ).then((answer) => answer.body)

/** A YAML job: build, the gate `prod` (with `gate` added to it) and its on_failure rollback, then deploy. */
const yamlGated = (gate: string) => {
  const config = (shell: string) =>
    `{platform: linux, image_resource: {type: registry-image, source: {repository: busybox}}, run: {path: sh, args: ["-c", ${JSON.stringify(shell)}]}}`
  return `jobs:
- name: release
  plan:
  - task: build
    config: ${config("echo built")}
  - gate: prod
    message: deploy to production?
${gate}
    on_failure:
      task: rollback
      config: ${config("echo rolled back")}
  - task: deploy
    config: ${config("echo deployed")}
`
}

/** One server with gates for a describe block: started before its tests, stopped after them. */
function sharedServer() {
  const shared = { server: undefined as ServerProcess | undefined, api: undefined as Api | undefined }
  beforeAll(async () => {
    shared.server = await servers.start(gatesOn)
    shared.api = apiOf(shared.server)
  }, 30_000)
  afterAll(() => shared.server?.child.kill("SIGTERM"))
  return {
    api: (...args: Parameters<Api>) => {
      if (shared.api === undefined) throw new Error("the server did not start")
      return shared.api(...args)
    },
    stdout: () => shared.server?.stdout() ?? "",
  }
}

/** Stops `server` with `signal` and answers its exit code once it is gone. */
function stop(server: ServerProcess, signal: NodeJS.Signals): Promise<number | null> {
  const exited = new Promise<number | null>((resolve) => server.child.once("exit", resolve))
  server.child.kill(signal)
  return exited
}

/** A server started again on `first`'s database, as after a restart of the same installation. */
const restart = (first: ServerProcess) =>
  servers.start([
    ...gatesOn,
    "--storage-sqlite-path",
    join(first.cwd, "runnel.db"),
    "--secrets-sqlite-path",
    join(first.cwd, "test.db"),
  ])

const tasksOf = async (api: Api, runId: string) =>
  (await api("GET", `/api/runs/${runId}/tasks`)).body as { path: string; status: string; stdout: string }[]

describe("approval gates of a script", () => {
  const { api, stdout } = sharedServer()

  it("waits on a gate listed pending with every field, and an approval lets the run succeed", async () => {
    const started = Date.now()
    const runId = await trigger(api, "approve-me", gated(`{ name: "deploy", message: "ship it?", timeout: "10m" }`))
    const [gate] = await gatesOf(api, runId)
    expect(gate).toEqual({
      id: `${runId}-gate-1`,
      run_id: runId,
      name: "deploy",
      status: "pending",
      message: "ship it?",
      created_at: expect.any(String),
      resolved_at: null,
      resolved_by: null,
      comment: "",
      timeout: "10m0s",
    })
    expect(Date.parse(gate.created_at)).toBeGreaterThanOrEqual(started - 1000)
    // The run shows what it waits on: its console says how to approve, its status names the gate.
    const waiting = await api("GET", `/api/runs/${runId}`)
    expect(waiting.body.status).toBe("running")
    // The gate is listed as soon as it is pending; the console line may be stored a moment later.
    const console = await eventually(
      async () => (await tasksOf(api, runId)).find((t) => t.path === "pipeline/console"),
      (task) => task?.stdout.includes("waiting for approval") === true,
      "the console says the run waits for approval",
    )
    expect(console?.stdout).toContain(`waiting for approval of gate "deploy" (id ${gate.id}, expires in 10m0s)`)
    expect(console?.stdout).toContain(`POST /api/gates/${gate.id}/approve`)
    expect(console?.stdout).toContain(`runnel gate approve ${gate.id}`)
    expect((await tasksOf(api, runId)).map((t) => t.path)).not.toContain("tasks/2/deploy")

    const approved = await api("POST", `/api/gates/${gate.id}/approve`, { comment: "looks good" })
    expect(approved.status).toBe(200)
    expect(approved.body).toMatchObject({
      id: gate.id,
      status: "approved",
      resolved_by: "anonymous",
      comment: "looks good",
    })
    expect(Date.parse(approved.body.resolved_at)).toBeGreaterThanOrEqual(Date.parse(gate.created_at))

    const run = await finished(api, runId)
    expect(run.status).toBe("success")
    const audit = stdout()
      .split("\n")
      .filter((line) => line.includes('"kind":"audit"') && line.includes(gate.id))
      .map((line) => JSON.parse(line))
    expect(audit).toEqual([
      expect.objectContaining({
        msg: "gate.approved",
        actor: "anonymous",
        gate: gate.id,
        run: runId,
        comment: "looks good",
      }),
    ])
    const tasks = await tasksOf(api, runId)
    expect(tasks.find((t) => t.path === "tasks/2/deploy")?.stdout).toBe("deployed\n")
    expect(tasks.find((t) => t.path === "pipeline/console")?.stdout).toContain("continuing after anonymous looks good")
    const [after] = (await api("GET", `/api/runs/${runId}/gates`)).body
    expect(after).toMatchObject({ status: "approved", resolved_by: "anonymous", comment: "looks good" })

    // Twice: 409 with its state; an unknown gate: 404.
    const again = await api("POST", `/api/gates/${gate.id}/approve`)
    expect(again.status).toBe(409)
    expect(again.body.error).toBe(`gate "${gate.id}" is already approved by anonymous`)
    expect((await api("POST", `/api/gates/${gate.id}/reject`)).status).toBe(409)
    const badStatus = await api("GET", "/api/gates?status=done")
    expect(badStatus.status).toBe(400)
    expect(badStatus.body.error).toBe("?status=done is not a gate status; known: pending, approved, rejected, expired")
    expect(
      (await api("GET", `/api/gates?status=approved&run_id=${runId}`)).body.map((g: { id: string }) => g.id),
    ).toEqual([gate.id])
    const unknown = await api("POST", "/api/gates/no-such-gate/approve")
    expect(unknown.status).toBe(404)
    expect(unknown.body.error).toBe('gate "no-such-gate" not found')
  }, 60_000)

  it("fails the run when the gate is rejected, naming the gate and who rejected it", async () => {
    const runId = await trigger(api, "reject-me", gated(`{ name: "prod" }`))
    const [gate] = await gatesOf(api, runId)
    expect(gate.timeout).toBeNull()
    const bad = await api("POST", `/api/gates/${gate.id}/reject`, { comment: 5 })
    expect(bad.status).toBe(400)
    expect(bad.body.error).toBe('"comment" must be a string, not number')
    const rejected = await api("POST", `/api/gates/${gate.id}/reject`, { comment: "not today" })
    expect(rejected.status).toBe(200)
    expect(rejected.body).toMatchObject({ status: "rejected", resolved_by: "anonymous", comment: "not today" })
    const run = await finished(api, runId)
    expect(run.status).toBe("failure")
    expect(run.error_message).toContain(`gate "prod" (${gate.id}) was rejected by anonymous: not today`)
    expect((await tasksOf(api, runId)).map((t) => t.path)).not.toContain("tasks/2/deploy")
  }, 60_000)

  it("expires a gate after its timeout, counted from its creation, and the script may catch it", async () => {
    const runId = await trigger(
      api,
      "expire-me",
      `export const pipeline = async () => {
  try {
    await pipeline.gate({ name: "soon", timeout: "2s" })
  } catch (error) {
    console.log("caught:", error.message)
    throw error
  }
}
`,
    )
    const [gate] = await gatesOf(api, runId)
    const [expired] = await gatesOf(api, runId, 1, "expired")
    const waitedMs = Date.parse(expired.resolved_at) - Date.parse(gate.created_at)
    expect(waitedMs).toBeGreaterThanOrEqual(2000)
    expect(waitedMs).toBeLessThan(6000)
    expect(expired.resolved_by).toBeNull()
    const run = await finished(api, runId)
    expect(run.status).toBe("failure")
    expect(run.error_message).toContain(`gate "soon" (${gate.id}) expired: nobody approved it within 2s`)
    const console = (await tasksOf(api, runId)).find((t) => t.path === "pipeline/console")
    expect(console?.stdout).toContain(`caught: gate "soon" (${gate.id}) expired`)
    const late = await api("POST", `/api/gates/${gate.id}/approve`)
    expect(late.status).toBe(409)
    expect(late.body.error).toBe(`gate "${gate.id}" is already expired`)
  }, 60_000)

  it("refuses a REST decision the gate's approvers do not allow (403), and any decision once its run ended (409)", async () => {
    const runId = await trigger(api, "approvers", gated(`{ name: "deploy", approvers: '"release" in Groups' }`))
    const [gate] = await gatesOf(api, runId)
    const refused = await api("POST", `/api/gates/${gate.id}/approve`)
    expect(refused.status).toBe(403)
    expect(refused.body.error).toContain('gate "deploy" may be decided only by users matching "release" in Groups')
    expect((await api("GET", `/api/gates/${gate.id}`)).body.status).toBe("pending")
    expect((await api("POST", `/api/runs/${runId}/stop`)).status).toBe(200)
    expect((await finished(api, runId)).status).toBe("aborted")
    const open = await trigger(api, "stopped", gated(`{ name: "deploy" }`))
    const [openGate] = await gatesOf(api, open)
    expect((await api("POST", `/api/runs/${open}/stop`)).status).toBe(200)
    expect((await finished(api, open)).status).toBe("aborted")
    const late = await api("POST", `/api/gates/${openGate.id}/approve`)
    expect(late.status).toBe(409)
    expect(late.body.error).toBe(
      `gate "${openGate.id}" can no longer be decided: its run ${open} ended with status aborted`,
    )
    const badApprovers = await trigger(api, "bad-approvers", gated(`{ name: "deploy", approvers: "Groups ==" }`))
    expect((await finished(api, badApprovers)).error_message).toContain(
      'gate "deploy": approvers "Groups ==": invalid expression',
    )
  }, 60_000)

  it("names the field of a bad gate call in the run's error", async () => {
    const noName = await trigger(api, "no-name", "export const pipeline = async () => { await pipeline.gate({}) }\n")
    const negative = await trigger(
      api,
      "negative",
      'export default async function () { await pipeline.gate({ name: "x", timeout: -5 }) }\n',
    )
    expect((await finished(api, noName)).error_message).toContain("pipeline.gate: name must be a non-empty string")
    expect((await finished(api, negative)).error_message).toContain(
      "pipeline.gate: timeout must be a positive number of seconds",
    )
  }, 60_000)
})

describe("gate steps of a YAML pipeline", () => {
  const { api } = sharedServer()

  const paths = async (runId: string) =>
    (await tasksOf(api, runId)).filter((t) => t.path.startsWith("jobs/")).map((t) => [t.path, t.status])

  it("continues the job once approved", async () => {
    const runId = await trigger(api, "yaml-approved", yamlGated("    timeout: 10m"))
    const [gate] = await gatesOf(api, runId)
    expect(gate).toMatchObject({ id: `${runId}-gate-1`, name: "prod", message: "deploy to production?" })
    expect(gate.timeout).toMatch(/^(9m59\.\d+s|10m0s)$/)
    expect((await api("POST", `/api/gates/${gate.id}/approve`, { comment: "go" })).status).toBe(200)
    expect((await finished(api, runId)).status).toBe("success")
    expect(await paths(runId)).toEqual([
      ["jobs/release/1/task/build", "success"],
      ["jobs/release/2/task/deploy", "success"],
    ])
    const console = (await tasksOf(api, runId)).find((t) => t.path === "pipeline/console")?.stdout
    expect(console).toContain('gate "prod" approved by anonymous: go')
  }, 60_000)

  it("fails the step when rejected, and its on_failure hook runs", async () => {
    const runId = await trigger(api, "yaml-rejected", yamlGated(""))
    const [gate] = await gatesOf(api, runId)
    expect((await api("POST", `/api/gates/${gate.id}/reject`, { comment: "no" })).status).toBe(200)
    expect((await finished(api, runId)).status).toBe("failure")
    expect(await paths(runId)).toEqual([
      ["jobs/release/1/task/build", "success"],
      ["jobs/release/2/task/rollback", "success"],
    ])
    const console = (await tasksOf(api, runId)).find((t) => t.path === "pipeline/console")?.stdout
    expect(console).toContain(`gate "prod" (${gate.id}) was rejected by anonymous: no`)
  }, 60_000)

  it("fails the step when its 2 s timeout expires the gate, and its on_failure hook runs", async () => {
    const runId = await trigger(api, "yaml-expired", yamlGated("    timeout: 2s"))
    const [gate] = await gatesOf(api, runId)
    const [expired] = await gatesOf(api, runId, 1, "expired")
    expect(Date.parse(expired.resolved_at) - Date.parse(gate.created_at)).toBeGreaterThanOrEqual(1900)
    expect((await finished(api, runId)).status).toBe("failure")
    expect(await paths(runId)).toEqual([
      ["jobs/release/1/task/build", "success"],
      ["jobs/release/2/task/rollback", "success"],
    ])
  }, 60_000)
})

describe("gates through MCP", () => {
  /** A gate's id in an MCP tool error, as JSON-escaped in its text. */
  const quoted = (text: string) => JSON.stringify(text).slice(1, -1)
  /** The gate decisions in a server's audit log. */
  const gateAudit = (server: ServerProcess) =>
    server
      .stdout()
      .split("\n")
      .filter((line) => line.includes('"kind":"audit"') && line.includes('"gate.'))
      .map((line) => JSON.parse(line))
  /** A server started with `args` and an MCP client of it sending `headers`, both ended after `test`. */
  async function withMcp(
    args: readonly string[],
    headers: Record<string, string>,
    test: (server: ServerProcess, mcp: Awaited<ReturnType<typeof mcpClient>>) => Promise<void>,
  ) {
    const server = await servers.start(args)
    const mcp = await mcpClient(server.url, headers)
    try {
      await test(server, mcp)
    } finally {
      await mcp.client.close()
      server.child.kill("SIGTERM")
    }
  }

  it("approve_gate and reject_gate decide as REST does, audited with the user as actor, refused as REST refuses", async () => {
    await withMcp([...gatesOn, "--mcp-allow-actions"], {}, async (server, { call }) => {
      const api = apiOf(server)
      const approvedRun = await trigger(api, "mcp-approve", gated(`{ name: "deploy" }`))
      const [gate] = await gatesOf(api, approvedRun)
      const approved = await call("approve_gate", { gate_id: gate.id, comment: "ship it" })
      expect(approved.isError, approved.text).toBe(false)
      expect(approved.json).toMatchObject({
        id: gate.id,
        run_id: approvedRun,
        name: "deploy",
        status: "approved",
        resolved_by: "anonymous",
        comment: "ship it",
      })
      expect((await finished(api, approvedRun)).status).toBe("success")
      expect((await tasksOf(api, approvedRun)).find((t) => t.path === "pipeline/console")?.stdout).toContain(
        "continuing after anonymous ship it",
      )
      const again = await call("reject_gate", { gate_id: gate.id })
      expect(again.isError).toBe(true)
      expect(again.text).toContain(quoted(`gate "${gate.id}" is already approved by anonymous`))

      const rejectedRun = await trigger(api, "mcp-reject", gated(`{ name: "deploy" }`))
      const [rejectedGate] = await gatesOf(api, rejectedRun)
      expect((await call("reject_gate", { gate_id: rejectedGate.id, comment: "not today" })).json).toMatchObject({
        status: "rejected",
        resolved_by: "anonymous",
        comment: "not today",
      })
      expect((await finished(api, rejectedRun)).status).toBe("failure")

      // The approvers rule refuses through MCP as through REST; the gate stays pending.
      const guardedRun = await trigger(
        api,
        "mcp-guarded",
        gated(`{ name: "deploy", approvers: '"release" in Groups' }`),
      )
      const [guarded] = await gatesOf(api, guardedRun)
      const refused = await call("approve_gate", { gate_id: guarded.id })
      expect(refused.isError).toBe(true)
      expect(refused.text).toContain(quoted('gate "deploy" may be decided only by users matching "release" in Groups'))
      expect((await api("GET", `/api/gates/${guarded.id}`)).body.status).toBe("pending")
      expect((await api("POST", `/api/runs/${guardedRun}/stop`)).status).toBe(200)
      const missing = await call("approve_gate", { gate_id: "no-such-gate" })
      expect(missing.isError).toBe(true)
      expect(missing.text).toContain(quoted('gate "no-such-gate" not found'))

      // Each decision audited once, by the tool (the watch leaves the server's own decisions alone).
      expect(gateAudit(server)).toEqual([
        expect.objectContaining({
          msg: "gate.approved",
          actor: "anonymous",
          via: "mcp",
          gate: gate.id,
          comment: "ship it",
        }),
        expect.objectContaining({ msg: "gate.rejected", actor: "anonymous", via: "mcp", gate: rejectedGate.id }),
      ])
    })
  }, 90_000)

  it("decides as the authenticated user, whom the approvers rule and the audit see", async () => {
    const authorization = `Basic ${Buffer.from("alice:pw").toString("base64")}`
    const basicAuth = ["--basic-auth-username", "alice", "--basic-auth-password", "pw"]
    await withMcp([...gatesOn, "--mcp-allow-actions", ...basicAuth], { authorization }, async (server, { call }) => {
      const api: Api = async (method, path, body) => {
        const response = await fetch(`${server.url}${path}`, {
          method,
          headers: { authorization, ...(body === undefined ? {} : { "content-type": "application/json" }) },
          body: body === undefined ? undefined : JSON.stringify(body),
        })
        const text = await response.text()
        return { status: response.status, body: text === "" ? undefined : JSON.parse(text), type: null }
      }
      const runId = await trigger(api, "mcp-alice", gated(`{ name: "deploy", approvers: 'Name == "alice"' }`))
      const [gate] = await gatesOf(api, runId)
      expect((await call("approve_gate", { gate_id: gate.id })).json).toMatchObject({
        status: "approved",
        resolved_by: "basic:alice",
      })
      expect((await finished(api, runId)).status).toBe("success")
      const bobs = await trigger(api, "mcp-bob", gated(`{ name: "deploy", approvers: 'Name == "bob"' }`))
      const [bobsGate] = await gatesOf(api, bobs)
      const refused = await call("reject_gate", { gate_id: bobsGate.id })
      expect(refused.isError).toBe(true)
      expect(refused.text).toContain(quoted(`gate "deploy" may be decided only by users matching Name == "bob"`))
      expect((await api("POST", `/api/runs/${bobs}/stop`)).status).toBe(200)
      expect(gateAudit(server)).toEqual([
        expect.objectContaining({ msg: "gate.approved", actor: "basic:alice", via: "mcp", gate: gate.id }),
      ])
    })
  }, 90_000)

  it("offers no approve_gate or reject_gate without --mcp-allow-actions", async () => {
    await withMcp(gatesOn, {}, async (server, { client }) => {
      const names = (await client.listTools()).tools.map((tool) => tool.name)
      expect(names).toContain("get_run")
      expect(names).not.toContain("approve_gate")
      expect(names).not.toContain("reject_gate")
      const answer = await bareToolCall(server.url, "approve_gate", { gate_id: "any" })
      expect(((await answer.json()) as Json).error.message).toContain('unknown tool "approve_gate"; the tools are:')
    })
  }, 60_000)
})

describe("the gates feature off", () => {
  it("fails pipeline.gate() and answers 403 on every gate path, and MCP has no gate tools", async () => {
    const server = await servers.start(["--mcp-allow-actions"])
    const api = apiOf(server)
    try {
      const runId = await trigger(api, "no-gates", gated(`{ name: "deploy" }`))
      const run = await finished(api, runId)
      expect(run.status).toBe("failure")
      expect(run.error_message).toContain("gates feature is not enabled")
      // A YAML gate step is stored, and fails when it runs, saying why; its on_failure hook runs.
      const yamlRun = await trigger(api, "no-gates-yaml", yamlGated(""))
      expect((await finished(api, yamlRun)).status).toBe("failure")
      const yamlTasks = await tasksOf(api, yamlRun)
      expect(yamlTasks.map((t) => t.path)).toContain("jobs/release/2/task/rollback")
      expect(yamlTasks.find((t) => t.path === "pipeline/console")?.stdout).toContain(
        'gate "prod" failed: gates feature is not enabled',
      )
      for (const [method, path] of [
        ["GET", `/api/runs/${runId}/gates`],
        ["GET", "/api/gates"],
        ["GET", "/api/gates/x"],
        ["POST", "/api/gates/x/approve"],
        ["POST", "/api/gates/x/reject"],
      ] as const) {
        const answer = await api(method, path)
        expect(answer.status, `${method} ${path}`).toBe(403)
        expect(answer.body.error).toContain('the "gates" feature is not enabled')
      }
      const tool = await bareToolCall(server.url, "reject_gate", { gate_id: "x" })
      expect(((await tool.json()) as Json).error.message).toContain('unknown tool "reject_gate"')
    } finally {
      server.child.kill("SIGTERM")
    }
  }, 60_000)
})

describe("a run waiting on a gate", () => {
  it("holds no --max-in-flight slot: with one slot, a second run starts and finishes meanwhile", async () => {
    const server = await servers.start([...gatesOn, "--max-in-flight", "1"])
    const api = apiOf(server)
    try {
      const waiting = await trigger(api, "release", gated(`{ name: "weekend" }`))
      const [gate] = await gatesOf(api, waiting)
      // Its status names the gate it waits on (what `kubectl get run -o yaml` shows).
      const run = await eventually(
        () => call(server.url, "GET", `/k8s/apis/runnel.dev/v1alpha1/namespaces/default/runs/${waiting}`),
        (got: Answer) =>
          (got.body.status?.conditions ?? []).some(
            (c: { type: string; status: string }) => c.type === "WaitingForApproval" && c.status === "True",
          ),
        "the Run's status names the pending gate",
      )
      const condition = run.body.status.conditions.find((c: { type: string }) => c.type === "WaitingForApproval")
      expect(condition.message).toContain(`gate "weekend" (${gate.id})`)

      const other = await trigger(api, "quick", `export const pipeline = async () => { ${task("t", "echo quick")} }\n`)
      expect((await finished(api, other)).status).toBe("success")
      expect((await api("GET", `/api/runs/${waiting}`)).body.status).toBe("running")

      expect((await api("POST", `/api/gates/${gate.id}/approve`)).status).toBe(200)
      expect((await finished(api, waiting)).status).toBe("success")
    } finally {
      server.child.kill("SIGTERM")
    }
  }, 90_000)

  it("survives SIGKILL: after a restart it still waits on the same gate, and finishes without rerunning its tasks", async () => {
    const counter = join(servers.dir, "build-count")
    const first = await servers.start(gatesOn)
    const before = apiOf(first)
    const runId = await trigger(
      before,
      "durable",
      `export const pipeline = async () => {
  ${task("build", `echo built >> ${counter}; echo built`)}
  const approval = await pipeline.gate({ name: "deploy", timeout: "1h" })
  console.log("approved by", approval.approvedBy)
  ${task("deploy", "echo deployed")}
}
`,
    )
    const [gate] = await gatesOf(before, runId)
    await stop(first, "SIGKILL")

    const second = await restart(first)
    const restarted = apiOf(second)
    try {
      expect((await restarted("GET", `/api/runs/${runId}`)).body.status).toBe("running")
      const [still] = await gatesOf(restarted, runId)
      expect(still).toMatchObject({ id: gate.id, status: "pending", created_at: gate.created_at })
      expect((await restarted("POST", `/api/gates/${gate.id}/approve`, { comment: "after restart" })).status).toBe(200)
      const run = await finished(restarted, runId)
      expect(run.status).toBe("success")
      expect(readFileSync(counter, "utf8")).toBe("built\n")
      const tasks = await tasksOf(restarted, runId)
      expect(tasks.filter((t) => t.path.startsWith("tasks/")).map((t) => [t.path, t.status])).toEqual([
        ["tasks/1/build", "success"],
        ["tasks/2/deploy", "success"],
      ])
      const console = tasks.find((t) => t.path === "pipeline/console")?.stdout ?? ""
      expect(console.split("waiting for approval of gate").length).toBe(2)
      expect(console).toContain("approved by anonymous")
    } finally {
      second.child.kill("SIGTERM")
    }
  }, 90_000)

  it("is left waiting, not ended, by a graceful shutdown, which does not wait --shutdown-grace for it", async () => {
    const first = await servers.start([...gatesOn, "--shutdown-grace", "60s"])
    const runId = await trigger(apiOf(first), "graceful", gated(`{ name: "deploy" }`))
    const [gate] = await gatesOf(apiOf(first), runId)
    const stopping = Date.now()
    expect(await stop(first, "SIGTERM")).toBe(0)
    expect(Date.now() - stopping).toBeLessThan(30_000)
    const second = await restart(first)
    try {
      const api = apiOf(second)
      expect((await api("GET", `/api/runs/${runId}`)).body.status).toBe("running")
      expect((await gatesOf(api, runId))[0].id).toBe(gate.id)
      expect((await api("POST", `/api/gates/${gate.id}/approve`)).status).toBe(200)
      expect((await finished(api, runId)).status).toBe("success")
    } finally {
      second.child.kill("SIGTERM")
    }
  }, 120_000)

  it("expires on time after a restart: its timeout counts from the gate's creation, not the restart", async () => {
    const first = await servers.start(gatesOn)
    const runId = await trigger(apiOf(first), "durable-expiry", gated(`{ name: "deploy", timeout: "8s" }`))
    const [gate] = await gatesOf(apiOf(first), runId)
    await stop(first, "SIGKILL")
    // Down for at least 4 s of the gate's 8: counted from the restart, it could not expire before created + 12 s.
    const created = Date.parse(gate.created_at)
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, created + 4000 - Date.now())))
    const second = await restart(first)
    try {
      const [expired] = await gatesOf(apiOf(second), runId, 1, "expired")
      const resolved = Date.parse(expired.resolved_at)
      expect(resolved - created).toBeGreaterThanOrEqual(8000)
      expect(resolved - created).toBeLessThan(11_500)
      expect((await finished(apiOf(second), runId)).status).toBe("failure")
    } finally {
      second.child.kill("SIGTERM")
    }
  }, 90_000)

  it("is approved with kubectl patch on spec.decision, which the operator copies into the status", async () => {
    const server = await servers.start(gatesOn)
    const api = apiOf(server)
    try {
      const runId = await trigger(api, "kubectl-approved", gated(`{ name: "deploy" }`))
      const [gate] = await gatesOf(api, runId)
      expect(await kubectl(server, "get", "gates")).toMatch(new RegExp(`${gate.id}\\s+${runId}\\s+deploy\\s+pending`))
      await kubectl(
        server,
        "patch",
        "gate",
        gate.id,
        "--type",
        "merge",
        "-p",
        '{"spec":{"decision":{"phase":"approved","by":"alice","comment":"from kubectl"}}}',
      )
      expect((await finished(api, runId)).status).toBe("success")
      const [approved] = (await api("GET", `/api/runs/${runId}/gates`)).body
      expect(approved).toMatchObject({ status: "approved", resolved_by: "alice", comment: "from kubectl" })
      // The API server audits a decision made through the Kubernetes API, as it does kubectl's pipeline changes.
      const audit = await eventually(
        async () =>
          server
            .stdout()
            .split("\n")
            .filter((line) => line.includes('"msg":"gate.approved"')),
        (lines) => lines.length > 0,
        "the kubectl decision is audited",
      )
      expect(audit.map((line) => JSON.parse(line))).toEqual([
        expect.objectContaining({
          actor: expect.stringMatching(/^kubernetes/),
          gate: gate.id,
          run: runId,
          pipeline: "kubectl-approved",
          comment: "from kubectl",
        }),
      ])
      // A decision is final: a second patch is refused by the resource's schema, and REST answers 409.
      await expect(
        kubectl(
          server,
          "patch",
          "gate",
          gate.id,
          "--type",
          "merge",
          "-p",
          '{"spec":{"decision":{"phase":"rejected"}}}',
        ),
      ).rejects.toThrow(/spec.decision is final once made/)
      expect((await api("POST", `/api/gates/${gate.id}/reject`)).status).toBe(409)
    } finally {
      server.child.kill("SIGTERM")
    }
  }, 90_000)
})

describe("runnel gate", () => {
  it("lists gates and approves and rejects them, while runnel pipeline run streams the wait", async () => {
    const server = await servers.start(gatesOn)
    const api = apiOf(server)
    const cli = (...args: string[]) => runnel([...args, "--server-url", server.url])
    try {
      expect((await api("PUT", "/api/pipelines/cli-gated", { content: gated(`{ name: "deploy" }`) })).status).toBe(201)
      const streamed = spawn(runnelBin, ["pipeline", "run", "cli-gated", "--server-url", server.url], {
        stdio: ["ignore", "pipe", "pipe"],
      })
      let output = ""
      streamed.stdout.setEncoding("utf8").on("data", (text: string) => {
        output += text
      })
      const exited = new Promise<number | null>((resolve) => streamed.on("close", resolve))
      await eventually(
        async () => output,
        (text) => text.includes("waiting for approval of gate"),
        "runnel pipeline run prints that the run waits",
      )
      const id = /\(id (\S+)\)/.exec(output)?.[1] ?? ""
      expect(id).toMatch(/-gate-1$/)

      const pending = await cli("gate", "ls")
      expect(pending.code).toBe(0)
      expect(pending.stdout).toMatch(/^ID\s+RUN\s+NAME\s+STATUS/)
      expect(pending.stdout).toMatch(new RegExp(`${id}\\s+\\S+\\s+deploy\\s+pending`))
      const approved = await cli("gate", "approve", id, "-m", "ship it")
      expect(approved).toMatchObject({ code: 0, stderr: "" })
      expect(approved.stdout).toMatch(new RegExp(`^gate "deploy" \\(${id}\\) of run \\S+: approved by anonymous\n$`))
      expect(await exited).toBe(0)
      expect(output).toContain("continuing after anonymous ship it")

      const again = await cli("gate", "reject", id)
      expect(again.code).toBe(1)
      expect(again.stderr).toBe(`runnel: gate "${id}" is already approved by anonymous\n`)
      const runId = id.replace(/-gate-1$/, "")
      const listed = await cli("gate", "ls", runId)
      expect(listed.stdout).toMatch(new RegExp(`${id}\\s+${runId}\\s+deploy\\s+approved\\s+anonymous`))
      expect((await cli("gate", "ls")).stdout).toBe("no gate is pending\n")

      const second = await trigger(api, "cli-gated", gated(`{ name: "deploy" }`))
      const [gate] = await gatesOf(api, second)
      const rejected = await cli("gate", "reject", gate.id)
      expect(rejected.stdout).toContain(`: rejected by anonymous`)
      expect((await finished(api, second)).status).toBe("failure")
      expect((await cli("gate", "approve", "no-such-gate")).stderr).toBe('runnel: gate "no-such-gate" not found\n')
    } finally {
      server.child.kill("SIGTERM")
    }
  }, 90_000)
})

describe("the gate examples", () => {
  it.each([
    ["release-gate.ts", "tasks/2/deploy", "tasks/2/rollback"],
    ["gates/release.yml", "jobs/release/2/task/deploy", "jobs/release/2/task/notify"],
  ])(
    "examples/%s deploys once approved, and rolls back when rejected",
    async (file, deploy, rollback) => {
      const server = await servers.start(gatesOn)
      const api = apiOf(server)
      try {
        const content = readFileSync(join(root, "examples", file), "utf8")
        for (const [action, status, ran] of [
          ["approve", "success", deploy],
          ["reject", "failure", rollback],
        ] as const) {
          const runId = await trigger(api, "example", content)
          const [gate] = await gatesOf(api, runId)
          expect(gate).toMatchObject({
            name: "production",
            message: "Deploy 1.4.0 to production?",
            timeout: expect.any(String),
          })
          expect((await api("POST", `/api/gates/${gate.id}/${action}`)).status).toBe(200)
          expect((await finished(api, runId)).status).toBe(status)
          const tasks = await tasksOf(api, runId)
          expect(tasks.find((t) => t.path === ran)?.status).toBe("success")
          expect(tasks.map((t) => t.path)).not.toContain(action === "approve" ? rollback : deploy)
        }
      } finally {
        server.child.kill("SIGTERM")
      }
    },
    90_000,
  )
})
