import { type ChildProcess, spawn } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { runnelBin } from "./cli.ts"
import { call, eventually, script } from "./server-process.ts"

// Ready means ready: a client that starts `runnel server` and uses it at once, as a script or a test
// harness would, meets 503s until the server is up and never a missing route.
const dir = mkdtempSync(join(tmpdir(), "runnel-server-ready-test-"))
const started = new Set<ChildProcess>()
afterAll(() => {
  for (const child of started) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL")
  rmSync(dir, { recursive: true, force: true })
})

/** A port nothing listens on now; the server is told to take it, since it prints its port only once ready. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer().listen(0, "127.0.0.1", () => {
      const address = probe.address()
      probe.close(() => (typeof address === "object" && address !== null ? resolve(address.port) : reject()))
    })
  })
}

/**
 * bin/runnel server on a free port chosen here, with its stdout kept; `listening` resolves at its listening
 * line; `stop()` sends SIGTERM and expects exit 0.
 */
async function spawnServer(args: readonly string[] = []) {
  const port = await freePort()
  const cwd = mkdtempSync(join(dir, "server-"))
  const child = spawn(
    runnelBin,
    ["server", "--port", String(port), "--driver", "native", "--storage-sqlite-path", join(cwd, "runnel.db"), ...args],
    { cwd, stdio: ["ignore", "pipe", "pipe"] },
  )
  started.add(child)
  let stdout = ""
  let stderr = ""
  child.stderr.setEncoding("utf8").on("data", (text: string) => {
    stderr += text
  })
  const listening = new Promise<void>((resolve) => {
    child.stdout.setEncoding("utf8").on("data", (text: string) => {
      stdout += text
      if (stdout.includes("listening on")) resolve()
    })
  })
  const exited = new Promise<number | null>((resolve) => child.on("exit", resolve))
  return {
    port,
    base: `http://127.0.0.1:${port}`,
    child,
    listening,
    exited,
    stdout: () => stdout,
    stderr: () => stderr,
    async stop() {
      child.kill("SIGTERM")
      expect(await exited).toBe(0)
    },
  }
}

/** A server that has printed its listening line. */
async function readyServer(args: readonly string[] = []) {
  const server = await spawnServer(args)
  await server.listening
  return server
}

type Seen = { status: number; body: unknown; retryAfter: string | null }

/** One request; undefined while nothing listens on the port yet. */
async function attempt(base: string, method: string, path: string, body?: unknown): Promise<Seen | undefined> {
  try {
    const response = await fetch(`${base}${path}`, {
      method,
      headers: body === undefined ? {} : { "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    })
    const text = await response.text()
    return { status: response.status, body: JSON.parse(text), retryAfter: response.headers.get("retry-after") }
  } catch (error) {
    const code = (error as { cause?: { code?: string } }).cause?.code
    if (code === "ECONNREFUSED" || code === "ECONNRESET") return undefined
    throw error
  }
}

describe("runnel server starting", () => {
  it("answers 503 until it is ready and then 201, never 404, to a client polling /health from its first moment", async () => {
    const server = await spawnServer()
    const { base, port } = server
    let lineSeen = false
    void server.listening.then(() => {
      lineSeen = true
    })
    const health: Seen[] = []
    const puts: Seen[] = []
    const livez: Seen[] = []
    const readyz: Seen[] = []
    const deadline = Date.now() + 30_000
    let saidReady = false
    for (;;) {
      if (server.child.exitCode !== null) throw new Error(`runnel server exited: ${server.stderr()}`)
      if (Date.now() > deadline) throw new Error(`no 201 within 30 s; stderr: ${server.stderr()}`)
      // The API first: the starting window may be shorter than the four requests of one round.
      const put = await attempt(base, "PUT", "/api/pipelines/x", { content: script("true") })
      // Ready by /health in the round before: this request reached the API and stored the pipeline.
      if (saidReady) expect(put?.status).toBe(201)
      const alive = await attempt(base, "GET", "/livez")
      const ready = await attempt(base, "GET", "/readyz")
      const said = await attempt(base, "GET", "/health")
      for (const [seen, list] of [
        [alive, livez],
        [ready, readyz],
        [said, health],
        [put, puts],
      ] as const) {
        if (seen !== undefined) list.push(seen)
      }
      if (put?.status === 201) break
      saidReady = said?.status === 200
    }
    // Everything before the 201 was a 503 saying the server is starting, with Retry-After.
    const starting = puts.slice(0, -1)
    for (const answer of starting) {
      expect(answer).toEqual({
        status: 503,
        body: { error: expect.stringMatching(/^the server is starting/) },
        retryAfter: "1",
      })
    }
    expect(puts.map((answer) => answer.status)).not.toContain(404)
    // The probes: /livez 200 all along; /readyz and /health 503 "starting", then 200 "ok" once only.
    expect(livez.every((answer) => answer.status === 200)).toBe(true)
    for (const probe of [readyz, health]) {
      const firstOk = probe.findIndex((answer) => answer.status === 200)
      const before = firstOk === -1 ? probe : probe.slice(0, firstOk)
      expect(
        before.every((answer) => answer.status === 503 && JSON.stringify(answer.body) === '{"status":"starting"}'),
      ).toBe(true)
      expect(probe.slice(firstOk === -1 ? probe.length : firstOk).every((answer) => answer.status === 200)).toBe(true)
    }
    // The window between listening and ready lasts a few milliseconds and may fall between two rounds, so
    // nothing here insists on meeting it; cli/http-server.test.ts checks every path's answer in that phase.
    // The listening line comes once the server is ready: by now (201 seen) it is printed.
    await server.listening
    expect(lineSeen).toBe(true)
    expect(server.stdout()).toMatch(new RegExp(`^runnel: listening on http://127\\.0\\.0\\.1:${port}\\n`))
    await server.stop()
  }, 60_000)

  it("is ready by the time it prints its listening line: /readyz 200 and the API answers at once", async () => {
    const server = await readyServer()
    const { base } = server
    expect(await call(base, "GET", "/readyz")).toMatchObject({ status: 200, body: { status: "ok" } })
    expect(await call(base, "GET", "/livez")).toMatchObject({ status: 200, body: { status: "ok" } })
    expect((await call(base, "PUT", "/api/pipelines/at-once", { content: script("true") })).status).toBe(201)
    await server.stop()
  }, 60_000)

  it("says it is shutting down on /readyz and /health while it drains, and stays live on /livez", async () => {
    const server = await readyServer(["--shutdown-grace", "30s"])
    const { base } = server
    expect((await call(base, "PUT", "/api/pipelines/long", { content: script("sleep 3") })).status).toBe(201)
    const id = (await call(base, "POST", "/api/pipelines/long/trigger")).body.run_id
    await eventually(
      () => call(base, "GET", `/api/runs/${id}`),
      (answer) => answer.body.status === "running",
      "the run is running",
    )
    server.child.kill("SIGTERM")
    await eventually(
      () => call(base, "GET", "/readyz"),
      (answer) => answer.status === 503,
      "/readyz says it is shutting down",
    )
    expect(await call(base, "GET", "/readyz")).toMatchObject({ status: 503, body: { status: "shutting down" } })
    expect(await call(base, "GET", "/health")).toMatchObject({ status: 503, body: { status: "shutting down" } })
    expect(await call(base, "GET", "/livez")).toMatchObject({ status: 200, body: { status: "ok" } })
    expect((await call(base, "GET", `/api/runs/${id}`)).status).toBe(200)
    expect(await server.exited).toBe(0)
  }, 60_000)

  it("answers the probes to GET and HEAD only", async () => {
    const server = await readyServer()
    const { base } = server
    for (const path of ["/livez", "/readyz", "/health"]) {
      expect((await fetch(`${base}${path}`, { method: "HEAD" })).status).toBe(200)
      const wrong = await call(base, "POST", path, {})
      expect(wrong.status).toBe(405)
      expect(wrong.body.error).toBe(`${path} does not answer POST; it answers GET and HEAD`)
    }
    await server.stop()
  }, 60_000)
})
