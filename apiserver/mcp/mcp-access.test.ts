import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { join } from "node:path"
import { KubeConfig } from "@kubernetes/client-node"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createEmbeddedApi } from "../../kubeserver/embedded-api.ts"
import { loadCrds } from "../../kubeserver/resource-types.ts"
import { quietLog } from "../../lib/core/log.ts"
import { ResourceClient } from "../../lib/kube/resource-client.ts"
import { pipelineLabel, runLabel, runnelApiVersion } from "../../lib/kube/resources.ts"
import type { LogStore } from "../../lib/logs/log-store.ts"
import { openSqliteLogStore } from "../../lib/logs/sqlite-log-store.ts"
import { openSqliteSecretStore } from "../../lib/secrets/sqlite-secret-store.ts"
import { mcpClient } from "../../test/mcp-client.ts"
import { bareToolCall } from "../../test/server-process.ts"
import { AccessPolicy } from "../access.ts"
import { startApiServer } from "../app.ts"
import { authenticator } from "../auth/authenticate.ts"
import { issueToken } from "../auth/session-token.ts"
import { testUser } from "../auth/test-user.fixture.ts"

// MCP's access with the real API server (embedded Kubernetes API, SQLite stores, HTTP) in OAuth mode:
// the pipeline "hidden" has an rbac_expression only admin matches; alice's token may see the rest, and
// a request without an Authorization header is refused. Each tool must obey it.
const sessionSecret = "an MCP test's session secret, 32+ characters long"
const tokens: Record<string, string> = {}
const oauth = {
  mode: "oauth" as const,
  sessionSecret,
  callbackUrl: "http://127.0.0.1:1",
  providers: [{ name: "github" as const, clientId: "id", clientSecret: "secret", url: "http://127.0.0.1:1" }],
}

const script = (line: string) => `export const pipeline = async () => { console.log(${JSON.stringify(line)}) }\n`

describe("MCP and what a user may see", () => {
  const closers: (() => Promise<unknown> | unknown)[] = []
  let base = ""
  let logs: LogStore
  const runs: Record<string, string> = {}

  beforeAll(async () => {
    const embedded = createEmbeddedApi({ db: ":memory:", crds: loadCrds(join(import.meta.dirname, "../../crds")) })
    const kubeHttp = createServer((req, res) => {
      if (!embedded.handle(req, res)) res.writeHead(404).end()
    })
    await new Promise<void>((resolve) => kubeHttp.listen(0, "127.0.0.1", resolve))
    closers.push(
      () => new Promise((resolve) => kubeHttp.close(resolve)),
      () => kubeHttp.closeAllConnections(),
      () => embedded.close(),
    )
    const kubeConfig = new KubeConfig()
    kubeConfig.loadFromOptions({
      clusters: [
        { name: "e", server: `http://127.0.0.1:${(kubeHttp.address() as AddressInfo).port}/k8s`, skipTLSVerify: true },
      ],
      users: [{ name: "u" }],
      contexts: [{ name: "c", cluster: "e", user: "u", namespace: "default" }],
      currentContext: "c",
    })
    logs = await openSqliteLogStore(":memory:")
    const secrets = await openSqliteSecretStore({ path: ":memory:", passphrase: "test passphrase" })
    closers.push(
      () => logs.close(),
      () => secrets.close(),
    )
    const api = await startApiServer({
      kubeConfig,
      namespace: "default",
      logs,
      secrets,
      defaultDriver: "native",
      allowedDrivers: ["native"],
      authenticate: authenticator(oauth),
      authMode: "oauth",
      policy: new AccessPolicy({ log: quietLog }),
      maxQueueSize: 100,
      features: ["gates"],
      maxBodyBytes: 1 << 20,
      webhookTimeoutMs: 1000,
      webhookMaxAgeMs: 60_000,
      mcpAllowActions: true,
      log: quietLog,
      audit: () => {},
    })
    closers.push(() => api.stop())
    const http = createServer(api.callback)
    await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve))
    closers.push(
      () => new Promise((resolve) => http.close(resolve)),
      () => http.closeAllConnections(),
    )
    base = `http://127.0.0.1:${(http.address() as AddressInfo).port}`
    for (const [nick, groups] of [
      ["alice", []],
      ["admin", ["admins"]],
    ] as const) {
      tokens[nick] = await issueToken(sessionSecret, testUser(nick, groups))
    }
    const asAdmin = { Authorization: `Bearer ${tokens.admin}` }
    for (const name of ["visible", "hidden"]) {
      const put = await fetch(`${base}/api/pipelines/${name}`, {
        method: "PUT",
        headers: { "Content-Type": "application/json", ...asAdmin },
        body: JSON.stringify({
          content: script(`${name} says shibboleth`),
          ...(name === "hidden" ? { rbac_expression: '"admins" in Groups' } : {}),
        }),
      })
      expect(put.status).toBe(201)
      const trigger = await fetch(`${base}/api/pipelines/${name}/trigger`, { method: "POST", headers: asAdmin })
      runs[name] = ((await trigger.json()) as { run_id: string }).run_id
      // No operator runs here: the output is stored as the operator would store it.
      const runId = runs[name] ?? ""
      logs.saveTask({
        runId,
        path: "pipeline/console",
        name: "console",
        status: "success",
        code: 0,
        startedAt: null,
        endedAt: null,
      })
      logs.append(runId, "pipeline/console", "stdout", `${name} says shibboleth\n`)
    }
    await logs.flush()
    // No operator runs here: each run's gate is created as the operator creates it, one only "release" may decide.
    const resources = new ResourceClient(kubeConfig, "default")
    for (const name of ["visible", "hidden"]) {
      const runId = runs[name] ?? ""
      await resources.createGate({
        apiVersion: runnelApiVersion,
        kind: "Gate",
        metadata: { name: `${runId}-gate-1`, labels: { [runLabel]: runId, [pipelineLabel]: name } },
        spec: { runRef: { name: runId }, name: "deploy", approvers: '"release" in Groups' },
      })
    }
  }, 30_000)
  afterAll(async () => {
    for (const close of closers.reverse()) await close()
  })

  const clientAs = async (user: string) => {
    const { client, call } = await mcpClient(base, { Authorization: `Bearer ${tokens[user]}` })
    closers.push(() => client.close())
    return call
  }

  it("refuses a request without credentials with 401 when authentication is on", async () => {
    const response = await bareToolCall(base, "list_pipelines")
    expect(response.status).toBe(401)
    expect(response.headers.get("www-authenticate")).toBe('Bearer realm="runnel"')
    expect(await response.json()).toEqual({ error: expect.stringContaining("authentication required") })
    const client = new Client({ name: "access-test", version: "1.0.0" })
    const forged = new StreamableHTTPClientTransport(new URL(`${base}/mcp`), {
      requestInit: { headers: { Authorization: `Bearer ${tokens.alice}x` } },
    })
    await expect(client.connect(forged)).rejects.toThrow(/401|bad signature/)
  })

  it("leaves a pipeline the user may not see out of every list and search", async () => {
    const call = await clientAs("alice")
    const names = (answer: { json: { items: { name?: string; pipeline_name?: string }[] } }) =>
      answer.json.items.map((item) => item.name ?? item.pipeline_name)
    expect(names(await call("list_pipelines"))).toEqual(["visible"])
    expect(names(await call("search_pipelines", { query: "shibboleth" }))).toEqual(["visible"])
    expect(names(await call("list_runs"))).toEqual(["visible"])
    expect(names(await call("search_tasks", { query: "shibboleth" }))).toEqual(["visible"])
    expect(names(await call("search_tasks", { query: "hidden says" }))).toEqual([])
  })

  it("refuses every tool that names the pipeline or one of its runs, with 403's message", async () => {
    const call = await clientAs("alice")
    const hiddenRun = runs.hidden ?? ""
    const refused = [
      ["get_pipeline", { pipeline: "hidden" }],
      ["list_runs", { pipeline: "hidden" }],
      ["search_tasks", { query: "shibboleth", pipeline_id: "hidden" }],
      ["search_tasks", { query: "shibboleth", run_id: hiddenRun }],
      ["get_run", { run_id: hiddenRun }],
      ["list_run_tasks", { run_id: hiddenRun }],
      ["get_run_task", { run_id: hiddenRun, path: "pipeline/console" }],
      ["get_task_output", { run_id: hiddenRun, path: "pipeline/console", pattern: "says" }],
      ["trigger_pipeline", { pipeline: "hidden" }],
      ["stop_run", { run_id: hiddenRun }],
    ] as const
    for (const [name, args] of refused) {
      const answer = await call(name, args)
      expect(answer.isError, name).toBe(true)
      expect(answer.text, name).toContain('you (github:alice) may not see pipeline \\"hidden\\"')
      expect(answer.text, name).not.toContain("shibboleth")
    }
    expect((await call("get_run", { run_id: runs.visible ?? "" })).isError).toBe(false)
  })

  it("refuses approve_gate and reject_gate as REST refuses: the pipeline's rule, then the gate's approvers", async () => {
    const call = await clientAs("alice")
    for (const name of ["approve_gate", "reject_gate"]) {
      const hidden = await call(name, { gate_id: `${runs.hidden}-gate-1` })
      expect(hidden.isError, name).toBe(true)
      expect(hidden.text, name).toContain('you (github:alice) may not see pipeline \\"hidden\\"')
      const visible = await call(name, { gate_id: `${runs.visible}-gate-1` })
      expect(visible.isError, name).toBe(true)
      expect(visible.text, name).toContain(
        'gate \\"deploy\\" may be decided only by users matching \\"release\\" in Groups',
      )
    }
    // admin may see the hidden pipeline: its gate is found, and refused by its approvers rule instead.
    const admin = await clientAs("admin")
    expect((await admin("approve_gate", { gate_id: `${runs.hidden}-gate-1` })).text).toContain("may be decided only by")
  })

  it("shows the same pipeline to a user who may see it", async () => {
    const call = await clientAs("admin")
    expect((await call("list_pipelines")).json.items.map((p: { name: string }) => p.name)).toEqual([
      "hidden",
      "visible",
    ])
    const hits = (await call("search_tasks", { query: "hidden says" })).json.items
    expect(hits).toEqual([
      expect.objectContaining({ run_id: runs.hidden, pipeline_name: "hidden", path: "pipeline/console" }),
    ])
    expect((await call("get_run_task", { run_id: runs.hidden ?? "", path: "pipeline/console" })).json.stdout).toBe(
      "hidden says shibboleth\n",
    )
  })
})
