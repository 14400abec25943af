import { afterAll, describe, expect, it } from "vitest"
import { testServer } from "../operator/engine/script-run.fixture.ts"
import { call, runToEnd, serverProcesses } from "./server-process.ts"

// fetch(), notify and nativeResources through `runnel server`: its flags and
// features reach the runs, and resource operations are tasks of the run in
// REST and in the streamed output.
const servers = serverProcesses("runnel-runtime-apis-test-")
afterAll(() => servers.cleanUp())

const pipeline = (base: string) => `export const pipeline = async () => {
  const [version] = await nativeResources.check({ type: "mock", source: { initial_version: "7" } })
  const data = await (await fetch("${base}/status")).json()
  notify.setConfigs({ builds: { type: "slack", token: "secret:SLACK_TOKEN", channels: ["#builds"] } })
  await notify.send({ name: "builds", message: "version " + version.version + " healthy " + data.healthy + " xoxb-server-token" })
}
`

describe("runtime APIs on runnel server", () => {
  it("reach local services with the server's --slack-api-url and secrets, and show resource operations as tasks", async () => {
    const service = await testServer((request, response) => {
      response.writeHead(200, { "content-type": "application/json" })
      response.end(request.url === "/api/chat.postMessage" ? '{"ok":true}' : '{"healthy":true}')
    })
    const server = await servers.start([
      "--slack-api-url",
      `${service.url}/api`,
      "--secret",
      "SLACK_TOKEN=xoxb-server-token",
    ])
    try {
      const stored = await call(server.url, "PUT", "/api/pipelines/apis", {
        content: pipeline(service.url),
        driver: "native",
      })
      expect(stored.status).toBe(201)
      const response = await fetch(`${server.url}/api/pipelines/apis/run`, { method: "POST" })
      const events = (await response.text())
        .split("\n")
        .filter((line) => line.startsWith("data: "))
        .map((line) => JSON.parse(line.slice(6)))
      expect(events.at(-1)).toMatchObject({ event: "exit", code: 0 })
      const streamed = events.map((event) => event.data ?? "").join("")
      expect(streamed).toMatch(/fetch GET http:\/\/127\.0\.0\.1:\d+\/status -> 200 in \d+ ms\n/)
      const slack = service.received.find((request) => request.url === "/api/chat.postMessage")
      expect(slack?.headers.authorization).toBe("Bearer xoxb-server-token")
      expect(JSON.parse(slack?.body ?? "{}")).toEqual({
        channel: "#builds",
        text: "version 7 healthy true ***REDACTED***",
      })
      const runId = events.at(-1).run_id
      const tasks = (await call(server.url, "GET", `/api/runs/${runId}/tasks`)).body
      expect(tasks.map((task: { path: string; status: string }) => [task.path, task.status])).toEqual([
        ["tasks/1/mock-check", "success"],
        ["pipeline/console", "success"],
      ])
    } finally {
      server.child.kill("SIGTERM")
      await service.close()
    }
  }, 60_000)

  it("with fetch and notifications left out of --allowed-features, both reject with the feature message and nothing is sent", async () => {
    const service = await testServer((_, response) => response.writeHead(200).end('{"ok":true,"healthy":true}'))
    const server = await servers.start([
      "--allowed-features",
      "webhooks,secrets",
      "--slack-api-url",
      `${service.url}/api`,
    ])
    try {
      const content = `export const pipeline = async () => {
        try { await fetch("${service.url}/status") } catch (error) { console.log(error.message) }
        notify.setConfigs({ h: { type: "http", url: "${service.url}/hook" } })
        try { await notify.send({ name: "h", message: "m" }) } catch (error) { console.log(error.message) }
      }`
      expect((await call(server.url, "PUT", "/api/pipelines/off", { content, driver: "native" })).status).toBe(201)
      const { run, tasks } = await runToEnd(server.url, "off")
      expect(run.status).toBe("success")
      expect(tasks.find((task: { path: string }) => task.path === "pipeline/console").stdout).toBe(
        "fetch feature is not enabled\nnotifications feature is not enabled\n",
      )
      expect(service.received).toHaveLength(0)
    } finally {
      server.child.kill("SIGTERM")
      await service.close()
    }
  }, 60_000)
})
