import { readdirSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { runnel } from "./cli.ts"
import { call, eventually, kubectl, type ServerProcess, serverProcesses } from "./server-process.ts"

// Pipeline secrets and webhook secrets through the REST API and the CLI of a real `runnel server`:
// write-only, encrypted at rest, resolved and redacted in runs, gone with their pipeline.
const servers = serverProcesses("runnel-secrets-test-")
afterAll(() => servers.cleanUp())

const printsSecrets = `export const pipeline = async () => {
  await runtime.run({
    name: "show",
    image: "busybox",
    command: { path: "sh", args: ["-c", "echo token=$TOKEN shared=$SHARED"] },
    env: { TOKEN: "secret:API_TOKEN", SHARED: "secret:SHARED" },
  })
}
`
const tokenValue = "tok-8f3a9c2e71d4"
const sharedGlobal = "global-value-5b7e"
const sharedOwn = "pipeline-value-c41d"

/** Every byte under the server's working directory: the databases, their WAL files, the key file. */
const bytesOnDisk = (server: ServerProcess) =>
  readdirSync(server.cwd, { withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => readFileSync(join(server.cwd, entry.name)).toString("latin1"))
    .join("\n")

describe("pipeline secrets over the REST API", () => {
  let server: ServerProcess
  beforeAll(async () => {
    server = await servers.start(["--secret", `SHARED=${sharedGlobal}`])
  }, 30_000)

  const runToEnd = async (pipeline: string) => {
    const trigger = await call(server.url, "POST", `/api/pipelines/${pipeline}/trigger`)
    expect(trigger.status).toBe(202)
    await eventually(
      () => call(server.url, "GET", `/api/runs/${trigger.body.run_id}`),
      (answer) => ["success", "failure", "error"].includes(answer.body.status),
      "the run finishes",
    )
    return (await call(server.url, "GET", `/api/runs/${trigger.body.run_id}/tasks`)).body
  }

  it("are resolved in runs (the pipeline's over the global ones), redacted, and never returned", async () => {
    const put = await call(server.url, "PUT", "/api/pipelines/with-secrets", {
      content: printsSecrets,
      secrets: { API_TOKEN: tokenValue },
    })
    expect(put.status).toBe(201)
    expect(JSON.stringify(put.body)).not.toContain(tokenValue)
    expect((await call(server.url, "GET", "/api/pipelines/with-secrets/secrets")).body).toEqual({ keys: ["API_TOKEN"] })

    const first = await runToEnd("with-secrets")
    expect(first[0]).toMatchObject({ status: "success", stdout: "token=***REDACTED*** shared=***REDACTED***\n" })

    // A second PUT adds a key and overrides the global SHARED for this pipeline only; API_TOKEN stays.
    const update = await call(server.url, "PUT", "/api/pipelines/with-secrets", {
      content: printsSecrets,
      secrets: { SHARED: sharedOwn },
    })
    expect(update.status).toBe(200)
    expect((await call(server.url, "GET", "/api/pipelines/with-secrets/secrets")).body).toEqual({
      keys: ["API_TOKEN", "SHARED"],
    })
    const second = await runToEnd("with-secrets")
    expect(second[0].stdout).toBe("token=***REDACTED*** shared=***REDACTED***\n")

    for (const path of ["/api/pipelines", "/api/pipelines/with-secrets", "/api/pipelines/with-secrets/secrets"]) {
      const text = JSON.stringify((await call(server.url, "GET", path)).body)
      for (const value of [tokenValue, sharedOwn, sharedGlobal]) expect(text, path).not.toContain(value)
    }
    const disk = bytesOnDisk(server)
    for (const value of [tokenValue, sharedOwn, sharedGlobal]) {
      expect(disk).not.toContain(value)
      expect(disk).not.toContain(Buffer.from(value).toString("base64"))
    }
    expect(server.stdout() + server.stderr()).not.toContain(tokenValue)
  })

  it("removes one key (204, then 404) and all of them with the pipeline", async () => {
    await call(server.url, "PUT", "/api/pipelines/removable", {
      content: printsSecrets,
      secrets: { API_TOKEN: tokenValue, OTHER: "x" },
    })
    expect((await call(server.url, "DELETE", "/api/pipelines/removable/secrets/OTHER")).status).toBe(204)
    const again = await call(server.url, "DELETE", "/api/pipelines/removable/secrets/OTHER")
    expect(again.status).toBe(404)
    expect(again.body.error).toMatch(/secret "OTHER" not found: pipeline "removable" has no secret of that name/)
    expect((await call(server.url, "GET", "/api/pipelines/removable/secrets")).body).toEqual({ keys: ["API_TOKEN"] })

    const first = await call(server.url, "GET", "/api/pipelines/removable")
    expect((await call(server.url, "DELETE", "/api/pipelines/removable")).status).toBe(204)
    expect((await call(server.url, "GET", "/api/pipelines/removable/secrets")).status).toBe(404)
    // A new pipeline of the same name starts without the old one's secrets.
    const recreated = await call(server.url, "PUT", "/api/pipelines/removable", { content: printsSecrets })
    expect(recreated.body.id).not.toBe(first.body.id)
    expect((await call(server.url, "GET", "/api/pipelines/removable/secrets")).body).toEqual({ keys: [] })
    const tasks = await runToEnd("removable")
    expect(tasks[0]).toMatchObject({ status: "error" })
  })

  it("refuses malformed secrets with 400 naming the problem, and stores nothing", async () => {
    for (const [secrets, message] of [
      [["A=1"], /"secrets" must be an object of names to string values/],
      [{ "not a name": "x" }, /secret name "not a name" is not valid/],
      [{ NUMBER: 5 }, /secret "NUMBER" must have a string value/],
      [{ BIG: "x".repeat(70_000) }, /secret "BIG" is too large/],
    ] as const) {
      const answer = await call(server.url, "PUT", "/api/pipelines/bad-secrets", { content: printsSecrets, secrets })
      expect(answer.status, JSON.stringify(secrets).slice(0, 40)).toBe(400)
      expect(answer.body.error).toMatch(message)
    }
    expect((await call(server.url, "GET", "/api/pipelines/bad-secrets")).status).toBe(404)
  })
})

describe("webhook secrets", () => {
  let server: ServerProcess
  beforeAll(async () => {
    server = await servers.start()
  }, 30_000)

  it('are kept in a core Secret owned by the Pipeline, shown only as has_webhook_secret, removed with ""', async () => {
    const put = await call(server.url, "PUT", "/api/pipelines/hooked", {
      content: printsSecrets,
      webhook_secret: "hook-secret-93e1",
    })
    expect(put.status).toBe(201)
    expect(put.body.has_webhook_secret).toBe(true)
    expect(JSON.stringify(put.body)).not.toContain("hook-secret-93e1")

    const secret = JSON.parse(await kubectl(server, "get", "secret", "runnel-webhook-hooked", "-o", "json"))
    expect(secret.metadata.ownerReferences).toEqual([
      expect.objectContaining({ kind: "Pipeline", name: "hooked", uid: put.body.id }),
    ])
    expect(Buffer.from(secret.data.webhookSecret, "base64").toString()).toBe("hook-secret-93e1")
    const pipeline = JSON.parse(await kubectl(server, "get", "pipelines.runnel.dev", "hooked", "-o", "json"))
    expect(pipeline.spec.webhookSecretRef).toEqual({ name: "runnel-webhook-hooked", key: "webhookSecret" })
    expect(bytesOnDisk(server)).not.toContain("hook-secret-93e1")

    // A PUT that does not mention it keeps it; "" removes it.
    const kept = await call(server.url, "PUT", "/api/pipelines/hooked", { content: printsSecrets })
    expect(kept.body.has_webhook_secret).toBe(true)
    const removed = await call(server.url, "PUT", "/api/pipelines/hooked", {
      content: printsSecrets,
      webhook_secret: "",
    })
    expect(removed.body.has_webhook_secret).toBe(false)
    await expect(kubectl(server, "get", "secret", "runnel-webhook-hooked")).rejects.toThrow(/not found/)
  })

  it("go with their pipeline", async () => {
    await call(server.url, "PUT", "/api/pipelines/short-lived", { content: printsSecrets, webhook_secret: "s" })
    expect((await call(server.url, "DELETE", "/api/pipelines/short-lived")).status).toBe(204)
    await eventually(
      () => kubectl(server, "get", "secrets", "-o", "name"),
      (names) => !names.includes("runnel-webhook-short-lived"),
      "the garbage collector removes the owned Secret",
    )
  })
})

describe("gated secret fields", () => {
  it("refuse webhook_secret without the webhooks feature and secrets without the secrets feature", async () => {
    const server = await servers.start(["--allowed-features", "fetch"])
    const hook = await call(server.url, "POST", "/api/pipelines", {
      name: "p",
      content: printsSecrets,
      webhook_secret: "s",
    })
    expect(hook.status).toBe(400)
    expect(hook.body.error).toMatch(/the "webhooks" feature is not enabled/)
    const secrets = await call(server.url, "PUT", "/api/pipelines/p", { content: printsSecrets, secrets: { A: "1" } })
    expect(secrets.status).toBe(400)
    expect(secrets.body.error).toMatch(/the "secrets" feature is not enabled/)
    expect((await call(server.url, "GET", "/api/pipelines")).body.total_items).toBe(0)
  })
})

describe("secrets through the CLI", () => {
  it("set -e/--secret stores pipeline secrets; run --global-secret gives one run a global secret", async () => {
    const server = await servers.start()
    const file = join(server.cwd, "cli-secrets.ts")
    writeFileSync(file, printsSecrets)
    const set = await runnel(["pipeline", "set", file, "-s", server.url, "-e", `API_TOKEN=${tokenValue}`])
    expect(set).toMatchObject({ code: 0, stdout: 'pipeline "cli-secrets" created\n' })
    expect((await call(server.url, "GET", "/api/pipelines/cli-secrets/secrets")).body).toEqual({ keys: ["API_TOKEN"] })

    const run = await runnel(["pipeline", "run", "cli-secrets", "-s", server.url, "--global-secret", "SHARED=one-run"])
    expect(run).toMatchObject({ code: 0, stdout: "token=***REDACTED*** shared=***REDACTED***\n" })
    const runs = await call(server.url, "GET", "/api/runs?pipeline_id=cli-secrets")
    expect(runs.body.items[0]).toMatchObject({ trigger_type: "cli", status: "success" })

    // The run's global secret was for that run only: the next run does not have it.
    const next = await runnel(["pipeline", "run", "cli-secrets", "-s", server.url])
    expect(next.code).toBe(2)
    expect(next.stderr).toContain('secret "SHARED"')
    expect(bytesOnDisk(server)).not.toContain("one-run")
  })
})
