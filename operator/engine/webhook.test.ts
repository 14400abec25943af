import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { WebhookRequest, WebhookResponse } from "../../lib/core/webhook-request.ts"
import type { LogStore } from "../../lib/logs/log-store.ts"
import { openSqliteLogStore } from "../../lib/logs/sqlite-log-store.ts"
import { staticSecrets } from "../../lib/secrets/secret-resolver.ts"
import { nativeDriverFactory } from "../drivers/native/native-driver.ts"
import { runScript, type TriggerType } from "./engine.ts"

// Webhook runs through the engine with real parts: the native driver, a SQLite log store on a temp file.
const dir = mkdtempSync(join(tmpdir(), "runnel-webhook-test-"))
const driver = nativeDriverFactory({ workRoot: join(dir, "work"), path: "/usr/local/bin:/usr/bin:/bin" }).create({})
let store: LogStore
beforeAll(async () => {
  store = await openSqliteLogStore(join(dir, "runnel.db"))
})
afterAll(async () => {
  await store.close()
  await driver.close()
  rmSync(dir, { recursive: true, force: true })
})

const push: WebhookRequest = {
  provider: "github",
  eventType: "push",
  method: "POST",
  url: "/api/webhooks/p1?ref=main",
  headers: { "x-github-event": "push", "Content-Type": "application/json" },
  query: { ref: "main" },
  body: JSON.stringify({ ref: "refs/heads/main", commits: [{ id: "abc" }] }),
}

let runs = 0
async function run(
  body: string,
  options: { webhook?: WebhookRequest; triggeredBy?: TriggerType; secrets?: Record<string, string> } = {},
) {
  const responses: WebhookResponse[] = []
  // Responses, task starts and ends and the run's end, in the order they happened.
  const timeline: string[] = []
  const runId = `webhook-test-${++runs}`
  const result = await runScript(
    {
      runId,
      pipelineId: "p1",
      pipelineName: "webhook-test",
      filename: "pipeline.ts",
      source: `export const pipeline = async () => {\n${body}\n}\n`,
      triggeredBy: options.triggeredBy ?? (options.webhook === undefined ? "manual" : "webhook"),
      args: [],
      ...(options.webhook === undefined ? {} : { webhook: options.webhook }),
    },
    {
      driver,
      driverName: "native",
      store,
      secrets: staticSecrets(options.secrets ?? {}),
      observer: {
        taskStarted: (task) => timeline.push(`started ${task.path}`),
        taskFinished: (task) => timeline.push(`finished ${task.path}`),
        output() {},
        runFinished: () => timeline.push("run finished"),
      },
      limits: { memoryMb: 64, timeoutMs: 30_000 },
      respond: (response) => {
        responses.push(response)
        timeline.push(`responded ${response.status}`)
      },
    },
    new AbortController().signal,
  )
  const stdout = store.output(runId, "pipeline/console", "stdout")
  const stderr = store.output(runId, "pipeline/console", "stderr")
  return { result, responses, timeline, stdout, stderr }
}

describe("http.request()", () => {
  it("gives the webhook's fields, with header lookups that ignore case, and triggeredBy webhook", async () => {
    const { result, stdout } = await run(
      `const request = http.request()
      console.log(pipelineContext.triggeredBy, request.provider, request.eventType, request.method, request.url)
      console.log(request.headers["X-GitHub-Event"], request.headers["x-github-event"], request.headers["CONTENT-TYPE"])
      console.log("X-Missing" in request.headers, "X-GITHUB-EVENT" in request.headers, Object.keys(request.headers).join(","))
      console.log(request.query.ref, JSON.parse(request.body).commits[0].id, Object.isFrozen(request), http.request() === request)`,
      { webhook: push },
    )
    expect(result.status).toBe("success")
    expect(stdout).toBe(
      [
        "webhook github push POST /api/webhooks/p1?ref=main",
        "push push application/json",
        "false true x-github-event,content-type",
        "main abc true true",
        "",
      ].join("\n"),
    )
  })

  it("is undefined when the run was not started by a webhook", async () => {
    const { result, stdout } = await run("console.log(pipelineContext.triggeredBy, String(http.request()))")
    expect(result.status).toBe("success")
    expect(stdout).toBe("manual undefined\n")
  })
})

describe("http.respond()", () => {
  it("takes the first response only and does not block: the pipeline goes on while the answer is out", async () => {
    const { result, responses, timeline, stdout } = await run(
      `const first = http.respond({ status: 201, body: "accepted", headers: { "X-Build": "42" } })
      const second = http.respond({ status: 500, body: "too late" })
      console.log(first, second)
      const task = await runtime.run({ name: "after", image: "busybox", command: { path: "sh", args: ["-c", "sleep 0.3; echo built"] } })
      console.log(task.stdout.trim())`,
      { webhook: push },
    )
    expect(result.status).toBe("success")
    expect(stdout).toBe("true false\nbuilt\n")
    expect(responses).toEqual([{ status: 201, headers: { "X-Build": "42" }, body: "accepted" }])
    expect(timeline).toEqual([
      "responded 201",
      "started pipeline/console",
      "started tasks/1/after",
      "finished tasks/1/after",
      "finished pipeline/console",
      "run finished",
    ])
  })

  it("refuses an invalid response with an error the script can catch, and takes a later valid one", async () => {
    const { result, responses, stdout } = await run(
      `for (const response of [{ status: 99 }, { status: 600 }, { status: 200.5 }, { status: "200" }, "ok",
          { headers: { "x-n": 1 } }, { headers: { "bad name": "x" } }, { headers: { "x-a": "1\\r\\nx-b: 2" } },
          { body: 42 }, { body: "x".repeat(600 * 1024) }]) {
        try { http.respond(response) } catch (error) { console.log(error.message) }
      }
      console.log(http.respond({}))`,
      { webhook: push },
    )
    expect(result.status).toBe("success")
    expect(stdout.split("\n")).toEqual([
      "http.respond: status must be a whole number from 100 to 599, got 99",
      "http.respond: status must be a whole number from 100 to 599, got 600",
      "http.respond: status must be a whole number from 100 to 599, got 200.5",
      'http.respond: status must be a whole number from 100 to 599, got "200"',
      'http.respond: expected an object such as { status: 200, body: "ok" }, got "ok"',
      'http.respond: header "x-n" must be a string, got 1; convert it with String()',
      'http.respond: "bad name" is not a valid header name; use letters, digits and "-", such as "content-type"',
      'http.respond: header "x-a" contains a line break or NUL, which HTTP does not allow',
      "http.respond: body must be a string, or an object or array to send as JSON, got 42",
      "http.respond: the body is 614400 bytes; the limit is 524288 (512 KiB)",
      "true",
      "",
    ])
    expect(responses).toEqual([{ status: 200, headers: {}, body: "" }])
  })

  it("fails the run when the script does not catch an invalid response, with the script's line", async () => {
    const { result, responses } = await run("  http.respond({ status: 1000 })", { webhook: push })
    expect(result.status).toBe("failure")
    expect(result.message).toBe(
      "http.respond: status must be a whole number from 100 to 599, got 1000 (at pipeline.ts:2:8)",
    )
    expect(responses).toEqual([])
  })

  it.each([
    ["an object", `{ ok: true, n: [1] }`, {}, { "content-type": "application/json" }, '{"ok":true,"n":[1]}'],
    ["an array", "[1, 2]", {}, { "content-type": "application/json" }, "[1,2]"],
    [
      "an object with its own content type",
      "{ a: 1 }",
      { "Content-Type": "application/vnd.x+json" },
      { "Content-Type": "application/vnd.x+json" },
      '{"a":1}',
    ],
  ])("sends %s as JSON", async (_, body, headers, sentHeaders, sentBody) => {
    const { responses } = await run(
      `http.respond({ status: 200, headers: ${JSON.stringify(headers)}, body: ${body} })`,
      {
        webhook: push,
      },
    )
    expect(responses).toEqual([{ status: 200, headers: sentHeaders, body: sentBody }])
  })

  it("redacts secret values in the response", async () => {
    const { responses } = await run(
      `const task = await runtime.run({ name: "leak", image: "busybox", env: { T: "secret:TOKEN" }, command: { path: "sh", args: ["-c", "printf %s \\"$T\\""] } })
      http.respond({ body: "token " + ${JSON.stringify("hunter2-value")}, headers: { "x-token": "hunter2-value" } })`,
      { webhook: push, secrets: { TOKEN: "hunter2-value" } },
    )
    expect(responses).toEqual([{ status: 200, headers: { "x-token": "***REDACTED***" }, body: "token ***REDACTED***" }])
  })

  it("does nothing and returns false when the run was not started by a webhook", async () => {
    const { result, responses, stdout } = await run(
      'console.log(http.respond({ status: 201, body: "x" }), http.respond({ status: 9000 }))',
    )
    expect(result.status).toBe("success")
    expect(stdout).toBe("false false\n")
    expect(responses).toEqual([])
  })
})

describe("webhookTrigger()", () => {
  it("is true in a run not started by a webhook, whatever the expression says", async () => {
    const { stdout, stderr } = await run(
      'console.log(webhookTrigger("false"), webhookTrigger(\'eventType == "nope"\'))',
    )
    expect(stdout).toBe("true true\n")
    expect(stderr).toBe("")
  })

  it("evaluates the expression against the webhook: provider, event, method, headers, query, body and payload", async () => {
    const { stdout, stderr } = await run(
      `for (const expression of [
        'provider == "github" && eventType == "push" && method == "POST"',
        'eventType == "pull_request"',
        'headers["content-type"] == "application/json" && "x-github-event" in headers',
        'query.ref == "main" && body.contains("refs/heads/main")',
        'payload.ref.endsWith("/main") && payload.commits[0].id == "abc"',
        'payload.ref == "refs/heads/dev"',
      ]) console.log(webhookTrigger(expression), webhookTrigger(expression))`,
      { webhook: push },
    )
    expect(stdout).toBe("true true\nfalse false\ntrue true\ntrue true\ntrue true\nfalse false\n")
    expect(stderr).toBe("")
  })

  it("gives payload null when the body is not JSON", async () => {
    const { stdout } = await run('console.log(webhookTrigger("payload == null"), webhookTrigger(\'body == "a=1"\'))', {
      webhook: { ...push, body: "a=1" },
    })
    expect(stdout).toBe("true true\n")
  })

  it("is false for an invalid expression and says why and where in the pipeline's console", async () => {
    const { result, stdout, stderr } = await run(
      `console.log(webhookTrigger('eventType == "push" &&'), webhookTrigger("evenType == 'push'"))
      console.log(webhookTrigger('eventType == "push" &&'))`,
      { webhook: push },
    )
    expect(result.status).toBe("success")
    expect(stdout).toBe("false false\nfalse\n")
    const lines = stderr.split("\n")
    expect(lines).toHaveLength(4)
    expect(lines[0]).toMatch(/^webhookTrigger\("eventType == \\"push\\" &&"\) is false: invalid expression at 1:\d+: /)
    expect(lines[1]).toMatch(
      /^webhookTrigger\("evenType == 'push'"\) is false: invalid expression at 1:1: .*evenType.*; webhook expressions know provider, eventType/,
    )
    expect(lines[2]).toBe(lines[0])
  })

  it("is false when evaluation fails, and says why in the pipeline's console", async () => {
    const { stdout, stderr } = await run("console.log(webhookTrigger('payload.missing == \"x\"'))", { webhook: push })
    expect(stdout).toBe("false\n")
    expect(stderr).toMatch(
      /^webhookTrigger\("payload.missing == \\"x\\""\) is false: expression failed at 1:\d+, counted as false: .*missing/,
    )
  })

  it("reports an invalid expression in a run not started by a webhook too, and is still true there", async () => {
    const { stdout, stderr } = await run('console.log(webhookTrigger("eventType =="))')
    expect(stdout).toBe("true\n")
    expect(stderr).toMatch(
      /^webhookTrigger\("eventType =="\) is true \(not a webhook run\): invalid expression at 1:\d+: /,
    )
  })

  it("throws when the expression is not a string", async () => {
    const { result } = await run("webhookTrigger(42)", { webhook: push })
    expect(result.status).toBe("failure")
    expect(result.message).toBe(
      `webhookTrigger: the expression must be a string such as 'eventType == "push"', got 42 (at pipeline.ts:2:1)`,
    )
  })
})
