import { createHmac } from "node:crypto"
import { sign as githubSign } from "@octokit/webhooks-methods"
import Stripe from "stripe"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { call, eventually, metricsOf, type ServerProcess, serverProcesses } from "./server-process.ts"

// Incoming webhooks through a real `runnel server`: every provider signed as it signs (with its own npm
// library where one exists), the Run created before the answer, and the answers of interface.md.
const servers = serverProcesses("runnel-webhooks-test-")
afterAll(() => servers.cleanUp())

const secret = "whsec-test-4f1c9a"
const hex = (data: string) => createHmac("sha256", secret).update(data).digest("hex")
const quiet = "export const pipeline = async () => {}\n"
const slow = `export const pipeline = async () => {
  await runtime.run({ name: "wait", image: "busybox", command: { path: "sleep", args: ["3"] } })
}
`
const throwing = 'export const pipeline = async () => { throw new Error("broke before answering") }\n'

type Hook = { status: number; body: string; headers: Headers; ms: number }

async function hook(
  server: ServerProcess,
  pipeline: string,
  options: {
    method?: string
    headers?: Record<string, string>
    body?: string
    query?: string
    signal?: AbortSignal
  } = {},
): Promise<Hook> {
  const started = performance.now()
  const response = await fetch(`${server.url}/api/webhooks/${pipeline}${options.query ?? ""}`, {
    method: options.method ?? "POST",
    headers: options.headers ?? {},
    ...(options.body === undefined ? {} : { body: options.body }),
    ...(options.signal === undefined ? {} : { signal: options.signal }),
  })
  return {
    status: response.status,
    body: await response.text(),
    headers: response.headers,
    ms: performance.now() - started,
  }
}

/** One signed request per provider, made as the provider makes it. */
async function signed(provider: string, body: string): Promise<Record<string, string>> {
  const now = Math.floor(Date.now() / 1000)
  switch (provider) {
    case "github":
      return { "X-GitHub-Event": "push", "X-Hub-Signature-256": await githubSign(secret, body) }
    case "gitlab":
      return { "X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": secret }
    case "bitbucket":
      return { "X-Event-Key": "repo:push", "X-Hub-Signature": `sha256=${hex(body)}` }
    case "slack":
      return {
        "X-Slack-Signature": `v0=${hex(`v0:${now}:${body}`)}`,
        "X-Slack-Request-Timestamp": String(now),
      }
    case "honeybadger":
      return { "Honeybadger-Token": secret }
    case "stripe":
      return {
        "Stripe-Signature": Stripe.webhooks.generateTestHeaderString({ payload: body, secret, timestamp: now }),
      }
    case "pagerduty":
      return { "X-PagerDuty-Signature": `v1=${"0".repeat(64)},v1=${hex(body)}` }
    case "linear":
      return { "Linear-Signature": hex(body) }
    case "sentry":
      return { "Sentry-Hook-Signature": hex(body), "Sentry-Hook-Resource": "issue" }
    default:
      return { "X-Webhook-Signature": hex(body) }
  }
}

const eventTypes: Record<string, string> = {
  github: "push",
  gitlab: "Push Hook",
  bitbucket: "repo:push",
  slack: "event_callback",
  honeybadger: "occurred",
  stripe: "charge.succeeded",
  pagerduty: "incident.triggered",
  linear: "Issue",
  sentry: "issue",
  generic: "",
}

describe("incoming webhooks", () => {
  let server: ServerProcess
  beforeAll(async () => {
    server = await servers.start(["--webhook-timeout", "1s", "--max-body-mb", "1"])
    for (const [name, content, webhookSecret] of [
      ["signed", quiet, secret],
      ["open", quiet, undefined],
      ["slow", slow, secret],
      ["throwing", throwing, secret],
    ] as const) {
      const put = await call(server.url, "PUT", `/api/pipelines/${name}`, {
        content,
        ...(webhookSecret === undefined ? {} : { webhook_secret: webhookSecret }),
      })
      expect(put.status).toBe(201)
    }
  }, 30_000)

  for (const provider of Object.keys(eventTypes)) {
    it(`takes a ${provider} webhook signed as ${provider} signs it and refuses a wrong or missing signature`, async () => {
      const body = JSON.stringify({
        type: provider === "slack" ? "event_callback" : provider === "stripe" ? "charge.succeeded" : "Issue",
        event: "occurred",
        messages: [{ event: "incident.triggered" }],
      })
      const headers = await signed(provider, body)
      const accepted = await hook(server, "signed", {
        headers: { ...headers, "Content-Type": "application/json" },
        body,
      })
      expect(accepted.status, accepted.body).toBe(202)
      const { run_id: runId } = JSON.parse(accepted.body)
      // The Run existed before the answer: it is there at once, with the request in it.
      const run = await call(server.url, "GET", `/api/runs/${runId}`)
      expect(run.body).toMatchObject({ trigger_type: "webhook", triggered_by: provider, pipeline_name: "signed" })

      const tampered = await hook(server, "signed", { headers, body: `${body} ` })
      const missing = await hook(server, "signed", {
        headers: Object.fromEntries(Object.entries(headers).filter(([name]) => !/sig|token/i.test(name))),
        body,
      })
      if (provider === "gitlab" || provider === "honeybadger") {
        // A token, not a signature over the body: the changed body still carries the right token.
        expect(tampered.status).toBe(202)
      } else {
        expect(tampered.status).toBe(401)
        expect(JSON.parse(tampered.body).error).not.toContain(secret)
      }
      expect(missing.status).toBe(401)
      expect(JSON.parse(missing.body).error).toMatch(/missing|no .*signature|token/i)
    })
  }

  it("records the provider and event type of each", async () => {
    const body = JSON.stringify({ type: "charge.succeeded" })
    const answer = await hook(server, "signed", { headers: await signed("stripe", body), body })
    const runId = JSON.parse(answer.body).run_id
    const runs = await call(server.url, "GET", `/api/runs/${runId}`)
    expect(runs.body.trigger_type).toBe("webhook")
  })

  it("accepts unsigned requests without a secret, except honeybadger's", async () => {
    expect((await hook(server, "open", { body: "not json at all" })).status).toBe(202)
    expect((await hook(server, "open", { method: "GET" })).status).toBe(202)
    const honeybadger = await hook(server, "open", { headers: { "Honeybadger-Token": "x" }, body: "{}" })
    expect(honeybadger.status).toBe(401)
  })

  it("takes any method", async () => {
    for (const method of ["GET", "PUT", "PATCH", "DELETE", "OPTIONS"]) {
      const answer = await hook(server, "open", { method })
      expect(answer.status, method).toBe(202)
    }
  })

  it("answers 202 at once when the pipeline ends without responding, or fails first", async () => {
    const body = "{}"
    for (const pipeline of ["signed", "throwing"]) {
      const answer = await hook(server, pipeline, { headers: { "X-Webhook-Signature": hex(body) }, body })
      expect(answer.status).toBe(202)
      // Well before the 1 s --webhook-timeout: the server saw the run end.
      expect(answer.ms).toBeLessThan(900)
    }
  })

  it("answers 202 with the run id once --webhook-timeout passes, and the run goes on", async () => {
    const body = "{}"
    const answer = await hook(server, "slow", { headers: { "X-Webhook-Signature": hex(body) }, body })
    expect(answer.status).toBe(202)
    expect(answer.ms).toBeGreaterThanOrEqual(950)
    const runId = JSON.parse(answer.body).run_id
    await eventually(
      () => call(server.url, "GET", `/api/runs/${runId}`),
      (run) => run.body.status === "success",
      "the slow run finishes after the answer",
    )
  })

  it("refuses unknown pipelines (404), paused ones (409) and bodies over --max-body-mb (413)", async () => {
    expect((await hook(server, "nope")).status).toBe(404)
    await call(server.url, "PUT", "/api/pipelines/resting", { content: quiet })
    await call(server.url, "POST", "/api/pipelines/resting/pause")
    const paused = await hook(server, "resting")
    expect(paused.status).toBe(409)
    expect(JSON.parse(paused.body).error).toMatch(/is paused/)
    const large = await hook(server, "open", { body: "x".repeat(1024 * 1024 + 1) })
    expect(large.status).toBe(413)
    const runs = await call(server.url, "GET", "/api/runs?pipeline_id=resting")
    expect(runs.body.total_items).toBe(0)
  })

  it("runs a pipeline stored through the Kubernetes API a moment before, before its watch event arrives", async () => {
    const stored = await call(server.url, "POST", "/k8s/apis/runnel.dev/v1alpha1/namespaces/default/pipelines", {
      apiVersion: "runnel.dev/v1alpha1",
      kind: "Pipeline",
      metadata: { name: "fresh" },
      spec: { content: quiet },
    })
    expect(stored.status).toBe(201)
    const answer = await hook(server, "fresh", { body: "{}" })
    expect(answer.status).toBe(202)
    const run = await call(server.url, "GET", `/api/runs/${JSON.parse(answer.body).run_id}`)
    expect(run.body.pipeline_name).toBe("fresh")
  })

  it("refuses replayed Slack and Stripe deliveries", async () => {
    const body = "{}"
    const old = Math.floor(Date.now() / 1000) - 600
    const slack = await hook(server, "signed", {
      headers: { "X-Slack-Signature": `v0=${hex(`v0:${old}:${body}`)}`, "X-Slack-Request-Timestamp": String(old) },
      body,
    })
    expect(slack.status).toBe(401)
    expect(JSON.parse(slack.body).error).toMatch(/replay/)
    const stripe = await hook(server, "signed", {
      headers: {
        "Stripe-Signature": Stripe.webhooks.generateTestHeaderString({ payload: body, secret, timestamp: old }),
      },
      body,
    })
    expect(stripe.status).toBe(401)
  })

  const secretsPath = "/k8s/api/v1/namespaces/default/secrets"
  const changeSecret = async (name: string, stringData: Record<string, string>) => {
    const response = await fetch(`${server.url}${secretsPath}/${name}`, {
      method: "PATCH",
      headers: { "Content-Type": "application/merge-patch+json" },
      body: JSON.stringify({ stringData }),
    })
    expect(response.status).toBe(200)
  }
  const githubSigned = (key: string, body: string) => ({
    "X-GitHub-Event": "push",
    "X-Hub-Signature-256": `sha256=${createHmac("sha256", key).update(body).digest("hex")}`,
  })

  it("checks a webhook Secret changed through the Kubernetes API with its new value at once, and closes on its deletion", async () => {
    expect(
      (await call(server.url, "PUT", "/api/pipelines/rotated", { content: quiet, webhook_secret: "old" })).status,
    ).toBe(201)
    const body = "{}"
    expect((await hook(server, "rotated", { headers: githubSigned("old", body), body })).status).toBe(202)
    await changeSecret("runnel-webhook-rotated", { webhookSecret: "new" })
    // Straight after the change, before its watch event may have arrived: the new value is read.
    expect((await hook(server, "rotated", { headers: githubSigned("new", body), body })).status).toBe(202)
    await eventually(
      () => hook(server, "rotated", { headers: githubSigned("old", body), body }),
      (answer) => answer.status === 401,
      "the old value is refused",
      5_000,
    )
    expect((await call(server.url, "DELETE", `${secretsPath}/runnel-webhook-rotated`)).status).toBe(200)
    const closed = await hook(server, "rotated", { headers: githubSigned("new", body), body })
    expect(closed.status).toBe(503)
    expect(JSON.parse(closed.body).error).toMatch(
      /Secret "runnel-webhook-rotated", key "webhookSecret"\) cannot be found/,
    )
  })

  it("checks deliveries against a Secret of the user's own that a Pipeline names, read each time", async () => {
    const created = await call(server.url, "POST", secretsPath, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "own-hook-secret" },
      stringData: { token: "mine" },
    })
    expect(created.status).toBe(201)
    const stored = await call(server.url, "POST", "/k8s/apis/runnel.dev/v1alpha1/namespaces/default/pipelines", {
      apiVersion: "runnel.dev/v1alpha1",
      kind: "Pipeline",
      metadata: { name: "own-secret" },
      spec: { content: quiet, webhookSecretRef: { name: "own-hook-secret", key: "token" } },
    })
    expect(stored.status).toBe(201)
    const body = "{}"
    expect((await hook(server, "own-secret", { headers: githubSigned("mine", body), body })).status).toBe(202)
    expect((await hook(server, "own-secret", { headers: githubSigned("theirs", body), body })).status).toBe(401)
    await changeSecret("own-hook-secret", { token: "changed" })
    expect((await hook(server, "own-secret", { headers: githubSigned("mine", body), body })).status).toBe(401)
    expect((await hook(server, "own-secret", { headers: githubSigned("changed", body), body })).status).toBe(202)
  })
})

describe("the pipeline's answer", () => {
  let server: ServerProcess
  const responder = `export const pipeline = async () => {
  const request = http.request()
  if (!webhookTrigger('eventType == "push" && has(payload.ref)')) {
    http.respond({ status: 204 })
    return
  }
  http.respond({
    status: 201,
    headers: { "X-Seen-Event": request.headers["X-GitHub-Event"], "Content-Length": "1" },
    body: { ref: request.body.length > 600000 ? "large" : JSON.parse(request.body).ref, method: request.method, query: request.query.q },
  })
  http.respond({ status: 500, body: "the second answer is ignored" })
  await runtime.run({ name: "after", image: "busybox", command: { path: "sleep", args: ["2"] } })
}
`
  beforeAll(async () => {
    server = await servers.start(["--webhook-timeout", "10s", "--max-body-mb", "2"])
    expect((await call(server.url, "PUT", "/api/pipelines/responder", { content: responder })).status).toBe(201)
  }, 30_000)

  it("is sent as soon as the pipeline responds, while the run goes on; the first response wins", async () => {
    const answer = await hook(server, "responder", {
      method: "PUT",
      query: "?q=1",
      headers: { "X-GitHub-Event": "push", "Content-Type": "application/json" },
      body: JSON.stringify({ ref: "refs/heads/main" }),
    })
    expect(answer.status).toBe(201)
    expect(JSON.parse(answer.body)).toEqual({ ref: "refs/heads/main", method: "PUT", query: "1" })
    expect(answer.headers.get("x-seen-event")).toBe("push")
    expect(answer.headers.get("content-type")).toMatch(/^application\/json/)
    // Before the 2 s task of the pipeline ends.
    expect(answer.ms).toBeLessThan(1800)
    const runId = answer.headers.get("x-runnel-run-id") ?? ""
    const run = await call(server.url, "GET", `/api/runs/${runId}`)
    expect(run.body.status).toBe("running")
  })

  it("follows webhookTrigger: a false condition answers the pipeline's 204", async () => {
    const answer = await hook(server, "responder", { headers: { "X-GitHub-Event": "issues" }, body: "{}" })
    expect(answer.status).toBe(204)
    const missingRef = await hook(server, "responder", { headers: { "X-GitHub-Event": "push" }, body: "not json" })
    expect(missingRef.status).toBe(204)
  })

  it("sees a body above 512 KiB, kept out of the Run", async () => {
    const body = JSON.stringify({ ref: "x", padding: "p".repeat(700 * 1024) })
    const answer = await hook(server, "responder", { headers: { "X-GitHub-Event": "push" }, body })
    expect(answer.status).toBe(201)
    expect(JSON.parse(answer.body).ref).toBe("large")
  })
})

describe("quick trigger in mode webhook", () => {
  it("runs the pipeline as if the request had arrived, and needs a webhook_secret (403)", async () => {
    const server = await servers.start()
    await call(server.url, "PUT", "/api/pipelines/with-hook", { content: quiet, webhook_secret: secret })
    await call(server.url, "PUT", "/api/pipelines/without-hook", { content: quiet })
    const trigger = await call(server.url, "POST", "/api/pipelines/with-hook/trigger", {
      mode: "webhook",
      webhook: { method: "POST", headers: { "X-GitHub-Event": "push" }, body: { ref: "refs/heads/main" } },
    })
    expect(trigger.status).toBe(202)
    const run = await call(server.url, "GET", `/api/runs/${trigger.body.run_id}`)
    expect(run.body).toMatchObject({ trigger_type: "webhook", triggered_by: "anonymous" })
    const refused = await call(server.url, "POST", "/api/pipelines/without-hook/trigger", { mode: "webhook" })
    expect(refused.status).toBe(403)
    for (const [webhook, message] of [
      ["GET", /"webhook" must be an object/],
      [{ method: "BREW" }, /"webhook.method" must be an HTTP method/],
      [{ headers: { a: 1 } }, /value of "a" must be a string/],
      [{ colour: "red" }, /unknown field "webhook.colour"/],
    ] as const) {
      const answer = await call(server.url, "POST", "/api/pipelines/with-hook/trigger", { mode: "webhook", webhook })
      expect(answer.status).toBe(400)
      expect(answer.body.error).toMatch(message)
    }
  })
})

describe("the webhooks feature gate", () => {
  it("off: /api/webhooks answers 403 and a webhook-mode trigger too", async () => {
    const server = await servers.start(["--allowed-features", "secrets"])
    await call(server.url, "PUT", "/api/pipelines/p", { content: quiet })
    const answer = await hook(server, "p")
    expect(answer.status).toBe(403)
    expect(JSON.parse(answer.body).error).toMatch(/the "webhooks" feature is not enabled/)
    expect((await call(server.url, "POST", "/api/pipelines/p/trigger", { mode: "webhook" })).status).toBe(403)
  })
})

describe("a webhook whose client leaves before the answer", () => {
  it("is let go at once, not held until --webhook-timeout, and its run goes on", async () => {
    const server = await servers.start(["--webhook-timeout", "60s", "--metrics-port", "0"])
    const metricsUrl = `${metricsOf(server)}/metrics`
    const lingering = `export const pipeline = async () => {
  await runtime.run({ name: "wait", image: "busybox", command: { path: "sleep", args: ["30"] } })
}
`
    const put = await call(server.url, "PUT", "/api/pipelines/lingering", {
      content: lingering,
      webhook_secret: secret,
    })
    expect(put.status).toBe(201)
    const body = "{}"
    const client = new AbortController()
    const delivery = hook(server, "lingering", {
      headers: { "X-Webhook-Signature": hex(body) },
      body,
      signal: client.signal,
    }).catch((error: unknown) => error)
    const [run] = await eventually(
      async () => (await call(server.url, "GET", "/api/runs?pipeline_id=lingering")).body.items,
      (items) => items.length === 1 && items[0].status === "running",
      "the webhook's run is running, and its delivery waits for an answer",
    )
    client.abort()
    expect(await delivery).toBeInstanceOf(Error)
    // Counted when the server stopped waiting: at once, where it would be a minute later without the client's leaving.
    const accepted = /^runnel_webhook_deliveries_total\{[^}]*outcome="accepted"[^}]*\} 1$/m
    await eventually(
      async () => (await fetch(metricsUrl)).text(),
      (text) => accepted.test(text),
      "the delivery is counted as accepted",
      5_000,
    )
    expect((await call(server.url, "GET", `/api/runs/${run.id}`)).body.status).toBe("running")
    server.child.kill("SIGTERM")
  })
})
