import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { staticSecrets } from "../../../lib/secrets/secret-resolver.ts"
import { globalScope, pipelineScope, resolverFor, type SecretStore } from "../../../lib/secrets/secret-store.ts"
import { openSqliteSecretStore } from "../../../lib/secrets/sqlite-secret-store.ts"
import { nativeDriverFactory } from "../../drivers/native/native-driver.ts"
import { type Received, scriptRunner, testServer } from "../script-run.fixture.ts"

// Notifications from a real script run to real HTTP servers on loopback: a
// plain receiver, and stand-ins of Slack's chat.postMessage and a Teams
// workflow webhook written from their public documentation.
const dir = mkdtempSync(join(tmpdir(), "runnel-notify-test-"))
let runner: Awaited<ReturnType<typeof scriptRunner>>
let secretStore: SecretStore
beforeAll(async () => {
  runner = await scriptRunner(
    nativeDriverFactory({ workRoot: join(dir, "work"), path: "/usr/bin:/bin" }).create({}),
    "native",
  )
  secretStore = await openSqliteSecretStore({ path: ":memory:", passphrase: "notify-test" })
  await secretStore.set(globalScope, { HOOK_TOKEN: "global-token-value", API_KEY: "global-api-key-0001" })
  await secretStore.set(pipelineScope("p1"), { HOOK_TOKEN: "pipeline-token-value" })
})
afterAll(async () => {
  await runner.close()
  await secretStore.close()
  rmSync(dir, { recursive: true, force: true })
})

/** The run's secrets as the server resolves them: pipeline scope, then global. */
const secrets = () => resolverFor(secretStore, [pipelineScope("p1"), globalScope])

/** A script that sends one notification with `configs`, printing the outcome (a caught rejection's message). */
const sendScript = (configs: object, name = "n", message = "build 42 finished") => `
export const pipeline = async () => {
  notify.setConfigs(${JSON.stringify(configs)})
  try {
    await notify.send({ name: ${JSON.stringify(name)}, message: ${JSON.stringify(message)} })
    console.log("sent")
  } catch (error) {
    console.log("rejected: " + error.message)
  }
}`

/**
 * Slack's chat.postMessage as docs.slack.dev describes it: POST with the token
 * in `Authorization: Bearer`, a JSON body with `channel` and `text`; always
 * HTTP 200, `{"ok": true, "channel", "ts", "message"}` or `{"ok": false,
 * "error": "<code>"}` (not_authed, invalid_auth, channel_not_found, no_text).
 */
function slackStandIn(token: string, channels: readonly string[]) {
  return testServer((request, response) => {
    const answer = (body: object) => {
      response.writeHead(200, { "content-type": "application/json; charset=utf-8" })
      response.end(JSON.stringify(body))
    }
    if (request.method !== "POST" || request.url !== "/api/chat.postMessage") {
      response.writeHead(404).end()
      return
    }
    const auth = request.headers.authorization
    if (auth === undefined) return answer({ ok: false, error: "not_authed" })
    if (auth !== `Bearer ${token}`) return answer({ ok: false, error: "invalid_auth" })
    if (!String(request.headers["content-type"]).startsWith("application/json")) {
      return answer({ ok: false, error: "invalid_arguments" })
    }
    const body = JSON.parse(request.body) as { channel?: string; text?: string }
    if (body.channel === undefined || !channels.includes(body.channel))
      return answer({ ok: false, error: "channel_not_found" })
    if (body.text === undefined || body.text === "") return answer({ ok: false, error: "no_text" })
    answer({ ok: true, channel: "C0123", ts: "1700000000.000100", message: { type: "message", text: body.text } })
  })
}

/**
 * A Teams workflow webhook ("When a Teams webhook request is received" then
 * "Post card in a chat or channel"): a JSON message whose attachments hold an
 * Adaptive Card (contentType application/vnd.microsoft.card.adaptive); it
 * answers 202 Accepted, and 400 to a body it cannot read as such a card.
 */
function teamsStandIn() {
  return testServer((request, response) => {
    try {
      const body = JSON.parse(request.body)
      const card = body.attachments[0]
      if (body.type !== "message" || card.contentType !== "application/vnd.microsoft.card.adaptive") throw new Error()
      if (card.content.type !== "AdaptiveCard" || !Array.isArray(card.content.body)) throw new Error()
      response.writeHead(202).end()
    } catch {
      response.writeHead(400, { "content-type": "application/json" }).end('{"error":"InvalidRequestContent"}')
    }
  })
}

const jsonOf = (received: Received) => JSON.parse(received.body)

describe("notify.send", () => {
  it("posts an http notification with secret headers resolved (pipeline scope first) and the message redacted", async () => {
    const receiver = await testServer((_, response) => response.writeHead(204).end())
    try {
      const { result, output } = await runner.run(
        sendScript(
          {
            n: {
              type: "http",
              url: `${receiver.url}/hooks/ci`,
              headers: { Authorization: "secret:HOOK_TOKEN", "X-Api-Key": "secret:API_KEY", "X-Plain": "plain" },
            },
          },
          "n",
          "deploy used global-api-key-0001 and pipeline-token-value",
        ),
        { secrets: secrets(), pipelineName: "deploy-app" },
      )
      expect(output("pipeline/console")).toBe("sent\n")
      expect(result.status).toBe("success")
      expect(receiver.received).toHaveLength(1)
      const [request] = receiver.received as [Received]
      expect(request.method).toBe("POST")
      expect(request.url).toBe("/hooks/ci")
      expect(request.headers.authorization).toBe("pipeline-token-value")
      expect(request.headers["x-api-key"]).toBe("global-api-key-0001")
      expect(request.headers["x-plain"]).toBe("plain")
      expect(request.headers["content-type"]).toBe("application/json")
      expect(jsonOf(request)).toEqual({
        name: "n",
        message: "deploy used ***REDACTED*** and ***REDACTED***",
        run_id: result.runId,
        pipeline_name: "deploy-app",
        status: "running",
      })
    } finally {
      await receiver.close()
    }
  })

  it("resolves secrets when sending, not at setConfigs: a missing key rejects naming it, and nothing is sent", async () => {
    const receiver = await testServer((_, response) => response.writeHead(204).end())
    try {
      const { output } = await runner.run(
        sendScript({ n: { type: "http", url: receiver.url, method: "PUT", headers: { "X-Token": "secret:NOT_SET" } } }),
        { secrets: secrets() },
      )
      expect(output("pipeline/console")).toContain('rejected: notify.send: secret "NOT_SET" is not set')
      expect(output("pipeline/console")).toContain("headers.X-Token")
      expect(receiver.received).toHaveLength(0)
    } finally {
      await receiver.close()
    }
  })

  it("posts to each Slack channel with chat.postMessage and the token from a secret", async () => {
    const slack = await slackStandIn("xoxb-test-token", ["#builds", "C0DEPLOY"])
    try {
      const { output } = await runner.run(
        sendScript(
          { team: { type: "slack", token: "secret:SLACK_TOKEN", channels: ["#builds", "C0DEPLOY"] } },
          "team",
          "green",
        ),
        { secrets: staticSecrets({ SLACK_TOKEN: "xoxb-test-token" }), network: { slackApiUrl: `${slack.url}/api/` } },
      )
      expect(output("pipeline/console")).toBe("sent\n")
      expect(slack.received.map(jsonOf)).toEqual([
        { channel: "#builds", text: "green" },
        { channel: "C0DEPLOY", text: "green" },
      ])
    } finally {
      await slack.close()
    }
  })

  it("rejects with Slack's error code when Slack answers ok: false", async () => {
    const slack = await slackStandIn("xoxb-test-token", ["#builds"])
    try {
      const { output } = await runner.run(
        sendScript({ team: { type: "slack", token: "xoxb-test-token", channels: ["#nowhere"] } }, "team"),
        { network: { slackApiUrl: `${slack.url}/api` } },
      )
      expect(output("pipeline/console")).toBe(
        'rejected: notify.send: slack notification "team" failed: Slack refused the message to channel #nowhere: channel_not_found\n',
      )
      const wrongToken = await runner.run(
        sendScript({ team: { type: "slack", token: "xoxb-other", channels: ["#builds"] } }, "team"),
        { network: { slackApiUrl: `${slack.url}/api` } },
      )
      expect(wrongToken.output("pipeline/console")).toContain("channel #builds: invalid_auth\n")
    } finally {
      await slack.close()
    }
  })

  it("posts an Adaptive Card to a Teams workflow webhook", async () => {
    const teams = await teamsStandIn()
    try {
      const { output } = await runner.run(
        sendScript({ chat: { type: "teams", webhook: "secret:TEAMS_URL" } }, "chat", "release *1.2* is out"),
        { secrets: staticSecrets({ TEAMS_URL: `${teams.url}/workflows/abc/triggers/manual/paths/invoke?sig=x` }) },
      )
      expect(output("pipeline/console")).toBe("sent\n")
      expect(teams.received).toHaveLength(1)
      expect(teams.received[0]?.url).toBe("/workflows/abc/triggers/manual/paths/invoke?sig=x")
      expect(jsonOf(teams.received[0] as Received).attachments[0].content.body).toEqual([
        { type: "TextBlock", text: "release *1.2* is out", wrap: true },
      ])
    } finally {
      await teams.close()
    }
  })

  it("tries again after a 503, waiting as Retry-After says, and succeeds on the 200", async () => {
    const receiver = await testServer((_, response, index) => {
      if (index === 0) response.writeHead(503, { "retry-after": "1" }).end("busy\n")
      else response.writeHead(200).end("ok")
    })
    try {
      const { output } = await runner.run(sendScript({ n: { type: "http", url: receiver.url } }))
      expect(output("pipeline/console")).toBe("sent\n")
      expect(receiver.received).toHaveLength(2)
      const [first, second] = receiver.received as [Received, Received]
      expect(second.at - first.at).toBeGreaterThanOrEqual(950)
      expect(second.body).toBe(first.body)
    } finally {
      await receiver.close()
    }
  })

  it("gives up after its attempts with the backend, the status and the body's first line; a 4xx is not tried again", async () => {
    const failing = await testServer((_, response) => response.writeHead(500).end("database down\nstack trace here"))
    const refusing = await testServer((_, response) => response.writeHead(404).end("no such hook"))
    try {
      const { output } = await runner.run(
        `export const pipeline = async () => {
          notify.setConfigs({ down: { type: "http", url: "${failing.url}" }, gone: { type: "http", url: "${refusing.url}" } })
          for (const name of ["down", "gone"]) {
            try { await notify.send({ name, message: "m" }) } catch (error) { console.log(error.message) }
          }
        }`,
      )
      expect(output("pipeline/console")).toBe(
        'notify.send: http notification "down" failed: http answered HTTP 500: database down (after 4 attempts)\n' +
          'notify.send: http notification "gone" failed: http answered HTTP 404: no such hook\n',
      )
      expect(failing.received).toHaveLength(4)
      expect(refusing.received).toHaveLength(1)
    } finally {
      await failing.close()
      await refusing.close()
    }
  })

  it("with the notifications feature off, rejects with exactly the feature message and sends nothing", async () => {
    const receiver = await testServer((_, response) => response.writeHead(204).end())
    try {
      const { output, result } = await runner.run(sendScript({ n: { type: "http", url: receiver.url } }), {
        network: { notifications: false },
      })
      expect(output("pipeline/console")).toBe("rejected: notifications feature is not enabled\n")
      expect(result.status).toBe("success")
      expect(receiver.received).toHaveLength(0)
    } finally {
      await receiver.close()
    }
  })
})

describe("notify bad input", () => {
  const attempt = async (call: string) => {
    const { output, result } = await runner.run(
      `export const pipeline = async () => {
        try { ${call}; console.log("accepted") } catch (error) { console.log(error.name + ": " + error.message) }
      }`,
    )
    expect(result.status).toBe("success")
    return output("pipeline/console").trim()
  }

  it("rejects a send to an unknown name, listing the configured names", async () => {
    expect(
      await attempt(
        'notify.setConfigs({ a: { type: "http", url: "http://127.0.0.1:9" }, b: { type: "teams", webhook: "https://x.example" } }); await notify.send({ name: "c", message: "m" })',
      ),
    ).toBe('Error: notify.send: no notification named "c"; configured: a, b')
    expect(await attempt('await notify.send({ name: "c", message: "m" })')).toBe(
      'Error: notify.send: no notification named "c"; none is configured: call notify.setConfigs first',
    )
  })

  it("refuses at setConfigs a config of an unknown type or with a missing field, naming it", async () => {
    expect(await attempt('notify.setConfigs({ mail: { type: "email", to: "a@b.c" } })')).toBe(
      'TypeError: notify.setConfigs: "mail" has type "email" (string), which is not a notification type; known: slack, teams, http',
    )
    expect(await attempt('notify.setConfigs({ s: { type: "slack", token: "secret:T" } })')).toBe(
      'TypeError: notify.setConfigs: "s" (slack) needs channels, a non-empty list of channel names or ids such as ["#builds"]; got nothing',
    )
    expect(await attempt('notify.setConfigs({ s: { type: "slack", channels: ["#a"] } })')).toContain(
      'TypeError: notify.setConfigs: "s" (slack) needs token',
    )
    expect(await attempt('notify.setConfigs({ t: { type: "teams" } })')).toContain(
      'TypeError: notify.setConfigs: "t" (teams) needs webhook',
    )
    expect(await attempt('notify.setConfigs({ h: { type: "http", url: "ftp://x" } })')).toBe(
      'TypeError: notify.setConfigs: "h" (http): url must be an http or https URL, or "secret:KEY"; got "ftp://x"',
    )
    expect(await attempt("notify.setConfigs(null)")).toContain("TypeError: notify.setConfigs: expected an object")
  })
})
