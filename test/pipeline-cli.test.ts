import { spawn } from "node:child_process"
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs"
import { createServer } from "node:net"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest"
import { runnel, runnelBin } from "./cli.ts"
import { call, serverProcesses } from "./server-process.ts"

// Store-time validation, feature gates, audit entries and the `runnel pipeline` client commands,
// against bin/runnel server in its own process on a temp database.
const servers = serverProcesses("runnel-pipeline-cli-test-")
const dir = servers.dir
afterAll(() => servers.cleanUp())
const startServer = (args: readonly string[] = []) => servers.start(args)

const hello = 'export const pipeline = async () => {\n  console.log("hello")\n}\n'

/** The audit entries the server wrote so far (JSON lines with kind "audit"). */
function auditEntries(stdout: string) {
  return stdout
    .split("\n")
    .filter((line) => line.startsWith("{"))
    .map((line) => JSON.parse(line))
    .filter((entry) => entry.kind === "audit")
}

async function freePort(): Promise<number> {
  const probe = createServer()
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve))
  const { port } = probe.address() as { port: number }
  await new Promise((resolve) => probe.close(resolve))
  return port
}

describe("runnel server: store-time checks, features, audit", () => {
  let server: Awaited<ReturnType<typeof startServer>>
  beforeAll(async () => {
    server = await startServer(["--allowed-features", "*,schedules"])
  }, 30_000)

  it("refuses a script that does not compile with 400, the compiler's message and line", async () => {
    const put = await call(server.url, "PUT", "/api/pipelines/broken", {
      content: "export const pipeline = async () => {\n  const x = ;\n}\n",
      content_type: "ts",
    })
    expect(put.status).toBe(400)
    expect(put.body.error).toContain("broken.ts:2:")
    expect(put.body.error).toContain('Unexpected ";"')
    const post = await call(server.url, "POST", "/api/pipelines", { name: "broken", content: "const = 1\n" })
    expect(post.status).toBe(400)
    expect(post.body.error).toMatch(/broken\.ts:1:\d+/)
    expect((await call(server.url, "GET", "/api/pipelines/broken")).status).toBe(404)
  })

  it("refuses a script without a pipeline export, and keeps accepting YAML", async () => {
    const put = await call(server.url, "PUT", "/api/pipelines/no-export", { content: "export const other = 1\n" })
    expect(put.status).toBe(400)
    expect(put.body.error).toContain("does not export a pipeline function")
    const yaml = await call(server.url, "PUT", "/api/pipelines/yaml-one", {
      content:
        'jobs:\n  - name: build\n    plan:\n      - task: unit\n        config:\n          platform: linux\n          run: { path: "true" }\n',
    })
    expect(yaml.status).toBe(201)
    expect(yaml.body.content_type).toBe("yaml")
  })

  it("lists the enabled features: * plus the named ones", async () => {
    const answer = await call(server.url, "GET", "/api/features")
    expect(answer.status).toBe(200)
    expect(answer.body).toEqual({ features: ["webhooks", "secrets", "notifications", "fetch", "schedules"] })
  })

  it("writes an audit line for upsert, rbac change, pause, unpause and delete", async () => {
    const created = await call(server.url, "PUT", "/api/pipelines/audited", { content: hello })
    expect(created.status).toBe(201)
    const id = created.body.id
    expect(
      (await call(server.url, "PUT", "/api/pipelines/audited", { content: hello, rbac_expression: "true" })).status,
    ).toBe(200)
    expect((await call(server.url, "POST", "/api/pipelines/audited/pause")).status).toBe(200)
    expect((await call(server.url, "POST", `/api/pipelines/${id}/unpause`)).status).toBe(200)
    expect((await call(server.url, "DELETE", "/api/pipelines/audited")).status).toBe(204)
    const entries = auditEntries(server.stdout()).filter((entry) => entry.pipeline === "audited")
    expect(entries.map((entry) => entry.msg)).toEqual([
      "pipeline.upsert",
      "pipeline.upsert",
      "pipeline.rbac.update",
      "pipeline.paused",
      "pipeline.unpaused",
      "pipeline.delete",
    ])
    for (const entry of entries) {
      expect(entry).toMatchObject({ pipeline: "audited", pipeline_id: id, actor: "anonymous", level: "info" })
      expect(typeof entry.time).toBe("string")
    }
    expect(entries[2]).toMatchObject({ old: null, new: "true" })
  })

  it("writes no audit line for a refused change", async () => {
    await call(server.url, "PUT", "/api/pipelines/refused", { content: "nope(" })
    expect(auditEntries(server.stdout()).some((entry) => entry.pipeline === "refused")).toBe(false)
  })
})

describe("runnel server --allowed-features", () => {
  it("stops at start on an unknown feature with one line listing the known ones (exit 2)", async () => {
    const db = join(dir, "unknown-feature.db")
    const flag = await runnel(["server", "--port", "0", "--storage-sqlite-path", db, "--allowed-features", "*,bogus"])
    expect(flag.code).toBe(2)
    expect(flag.stderr.trim().split("\n")).toHaveLength(1)
    expect(flag.stderr).toContain('unknown feature "bogus"')
    expect(flag.stderr).toContain("webhooks, secrets, notifications, fetch, schedules, gates")
    const env = await runnel(["server", "--port", "0", "--storage-sqlite-path", db], {
      env: { CI_ALLOWED_FEATURES: "gates,nope" },
    })
    expect(env.code).toBe(2)
    expect(env.stderr).toContain('unknown feature "nope"')
  }, 30_000)
})

describe("runnel pipeline (client commands)", () => {
  let server: Awaited<ReturnType<typeof startServer>>
  let work: string
  const client = (args: readonly string[]) => runnel(["pipeline", ...args, "-s", server.url], { cwd: work })
  beforeAll(async () => {
    server = await startServer()
    work = mkdtempSync(join(dir, "client-"))
    writeFileSync(join(work, "hello.ts"), hello)
    writeFileSync(
      join(work, "flow.yaml"),
      'jobs:\n  - name: build\n    plan:\n      - task: unit\n        config:\n          platform: linux\n          run: { path: "true" }\n',
    )
  }, 30_000)

  it("sets a file under its base name with its content type, and ls shows it", async () => {
    const set = await client(["set", "hello.ts"])
    expect(set).toMatchObject({ code: 0, stdout: 'pipeline "hello" created\n' })
    expect((await client(["set", "hello.ts"])).stdout).toBe('pipeline "hello" updated\n')
    const named = await client([
      "set",
      "flow.yaml",
      "--name",
      "flow",
      "--driver",
      "native",
      "--driver-config",
      '{"a":1}',
    ])
    expect(named.code).toBe(0)
    // Top-level keys Concourse ignores (atc/config.go) are stored, and the answer's notes go to stderr.
    writeFileSync(join(work, "anchored.yml"), `shared: {x: 1}\n${readFileSync(join(work, "flow.yaml"), "utf8")}`)
    expect(await client(["set", "anchored.yml"])).toMatchObject({
      code: 0,
      stdout: 'pipeline "anchored" created\n',
      stderr: 'note: line 1: top-level key "shared" ignored, as Concourse ignores it\n',
    })
    const stored = await call(server.url, "GET", "/api/pipelines/flow")
    expect(stored.body).toMatchObject({ content_type: "yaml", driver: "native", driver_config: { a: 1 } })

    const ls = await client(["ls"])
    expect(ls.code).toBe(0)
    const lines = ls.stdout.trim().split("\n")
    expect(lines[0]).toMatch(/^NAME\s+TYPE\s+DRIVER\s+PAUSED\s+UPDATED$/)
    expect(lines.some((line) => /^hello\s+ts\s+native\s+no\s+\S+$/.test(line))).toBe(true)
    expect(lines.some((line) => /^flow\s+yaml\s+native\s+no\s+\S+$/.test(line))).toBe(true)
    const json = JSON.parse((await client(["ls", "--json"])).stdout)
    expect(json.map((p: { name: string }) => p.name)).toEqual(["anchored", "flow", "hello"])
  }, 30_000)

  it("refuses a script that does not compile with the server's message (exit 1)", async () => {
    writeFileSync(join(work, "bad.ts"), "export const pipeline = async () => {\n  const x = ;\n}\n")
    const set = await client(["set", "bad.ts"])
    expect(set.code).toBe(1)
    expect(set.stderr).toContain("bad.ts:2:")
  })

  it("triggers a run and prints an id the server knows", async () => {
    const trigger = await client(["trigger", "hello", "--args", "a", "--args", "b"])
    expect(trigger.code).toBe(0)
    const id = trigger.stdout.trim()
    expect(id).toMatch(/^run-/)
    const run = await call(server.url, "GET", `/api/runs/${id}`)
    expect(run.status).toBe(200)
    expect(run.body).toMatchObject({ id, pipeline_name: "hello", trigger_type: "args", args: ["a", "b"] })
  })

  it("pauses and unpauses: a paused pipeline's trigger prints the server's message (exit 1)", async () => {
    expect(await client(["pause", "hello"])).toMatchObject({ code: 0, stdout: 'pipeline "hello" paused\n' })
    expect((await call(server.url, "GET", "/api/pipelines/hello")).body.paused).toBe(true)
    const refused = await client(["trigger", "hello"])
    expect(refused.code).toBe(1)
    expect(refused.stderr).toBe(
      'runnel: pipeline "hello" is paused; unpause it with POST /api/pipelines/hello/unpause\n',
    )
    expect(await client(["unpause", "hello"])).toMatchObject({ code: 0, stdout: 'pipeline "hello" unpaused\n' })
    expect((await call(server.url, "GET", "/api/pipelines/hello")).body.paused).toBe(false)
  }, 30_000)

  it("removes a pipeline; removing it again prints the 404's message", async () => {
    writeFileSync(join(work, "gone.ts"), hello)
    expect((await client(["set", "gone.ts"])).code).toBe(0)
    expect(await client(["rm", "gone"])).toMatchObject({ code: 0, stdout: 'pipeline "gone" removed\n' })
    expect((await call(server.url, "GET", "/api/pipelines/gone")).status).toBe(404)
    expect(await client(["rm", "gone"])).toMatchObject({ code: 1, stderr: 'runnel: pipeline "gone" not found\n' })
  }, 30_000)

  it("says in one line that --driver-config is not JSON (exit 2), before calling the server", async () => {
    const set = await client(["set", "hello.ts", "--driver-config", "{bad"])
    expect(set.code).toBe(2)
    expect(set.stderr.trim().split("\n")).toHaveLength(1)
    expect(set.stderr).toContain("--driver-config is not valid JSON")
  })

  it("names the URL of an unreachable server in one line (exit 2), from -s or CI_SERVER_URL", async () => {
    const url = `http://127.0.0.1:${await freePort()}`
    const flag = await runnel(["pipeline", "ls", "-s", url])
    expect(flag.code).toBe(2)
    expect(flag.stderr.trim().split("\n")).toHaveLength(1)
    expect(flag.stderr).toContain(`cannot reach the runnel server at ${url}`)
    const env = await runnel(["pipeline", "rm", "x"], { env: { CI_SERVER_URL: url } })
    expect(env.code).toBe(2)
    expect(env.stderr).toContain(url)
  })

  it("sends user:password@ as Basic auth and --auth-token as Bearer", async () => {
    const seen: (string | undefined)[] = []
    const { createServer: createHttp } = await import("node:http")
    const fake = createHttp((req, res) => {
      seen.push(req.headers.authorization)
      res.writeHead(200, { "Content-Type": "application/json" })
      res.end('{"items":[],"has_next":false}')
    })
    await new Promise<void>((resolve) => fake.listen(0, "127.0.0.1", resolve))
    const { port } = fake.address() as { port: number }
    try {
      expect((await runnel(["pipeline", "ls", "-s", `http://ann:s%40cret@127.0.0.1:${port}`])).code).toBe(0)
      expect((await runnel(["pipeline", "ls", "-s", `http://127.0.0.1:${port}`, "--auth-token", "tok"])).code).toBe(0)
    } finally {
      fake.close()
    }
    expect(seen).toEqual([`Basic ${Buffer.from("ann:s@cret").toString("base64")}`, "Bearer tok"])
  })

  it("runs a pipeline: streams its output to stdout and stderr and exits with its code", async () => {
    writeFileSync(
      join(work, "echo.ts"),
      'export const pipeline = async () => {\n  console.log("args", pipelineContext.args.join(" "))\n  await runtime.run({ name: "s", image: "busybox", command: { path: "sh", args: ["-c", "echo out; echo err >&2"] } })\n}\n',
    )
    writeFileSync(join(work, "throws.ts"), 'export const pipeline = async () => {\n  throw new Error("boom")\n}\n')
    expect((await client(["set", "echo.ts"])).code).toBe(0)
    expect((await client(["set", "throws.ts"])).code).toBe(0)
    const ok = await runnel(["pipeline", "run", "echo", "-s", server.url, "--", "a", "b"])
    expect(ok).toMatchObject({ code: 0, stdout: "args a b\nout\n", stderr: "err\n" })
    const failed = await client(["run", "throws"])
    expect(failed.code).toBe(1)
    expect(failed.stderr).toContain("Error: boom (at throws.ts:2:9)")
    const missing = await client(["run", "nope"])
    expect(missing).toMatchObject({ code: 1, stderr: 'runnel: pipeline "nope" not found\n' })
  }, 30_000)

  it("detaches on Ctrl-C: exit 130, says how to stop the run, and the run goes on", async () => {
    writeFileSync(
      join(work, "slow.ts"),
      'export const pipeline = async () => {\n  console.log("start")\n  await runtime.run({ name: "s", image: "busybox", command: { path: "sleep", args: ["5"] } })\n}\n',
    )
    expect((await client(["set", "slow.ts"])).code).toBe(0)
    const child = spawn(runnelBin, ["pipeline", "run", "slow", "-s", server.url], { stdio: ["ignore", "pipe", "pipe"] })
    onTestFinished(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL")
    })
    let stdout = ""
    let stderr = ""
    child.stderr.setEncoding("utf8").on("data", (text: string) => {
      stderr += text
    })
    await new Promise<void>((resolve) =>
      child.stdout.setEncoding("utf8").on("data", (text: string) => {
        stdout += text
        if (stdout.includes("start")) resolve()
      }),
    )
    child.kill("SIGINT")
    const code = await new Promise((resolve) => child.on("close", resolve))
    expect(code).toBe(130)
    const runId = /detached; run (\S+) goes on/.exec(stderr)?.[1]
    expect(runId, stderr).toBeDefined()
    expect(stderr).toContain(`POST ${server.url}/api/runs/${runId}/stop`)
    const run = await call(server.url, "GET", `/api/runs/${runId}`)
    expect(run.body).toMatchObject({ pipeline_name: "slow", status: "running", trigger_type: "cli" })
  }, 30_000)

  it("has --help on every command", async () => {
    for (const command of ["set", "run", "trigger", "ls", "rm", "pause", "unpause"]) {
      const help = await runnel(["pipeline", command, "--help"])
      expect(help.code).toBe(0)
      expect(help.stdout).toContain("--server-url")
    }
  }, 30_000)
})
