import { writeFileSync } from "node:fs"
import { readFile } from "node:fs/promises"
import { get } from "node:http"
import { connect, type Socket } from "node:net"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { call, eventually, script, serverProcesses } from "./server-process.ts"

const servers = serverProcesses("runnel-sse-crowd-")
afterAll(() => servers.cleanUp())

const pausedClients = 980
const readingClients = 20
/** What the run prints: twice the 4 MiB a stalled client may fall behind (apiserver/routes/events.ts). */
const totalBytes = 8 << 20
const line = "a line of output that a thousand clients follow, 64 bytes long.\n"
const expected = line.repeat(Math.ceil(totalBytes / line.length)).slice(0, totalBytes)

/** The server's resident memory in bytes, from /proc. */
const rssOf = async (pid: number) => {
  const kib = /VmRSS:\s+(\d+) kB/.exec(await readFile(`/proc/${pid}/status`, "utf8"))?.[1]
  return Number(kib) * 1024
}

/** The stdout text of an event stream's frames, and its last event. */
function parse(text: string): { stdout: string; last: unknown; lastId: number | undefined } {
  let stdout = ""
  let last: unknown
  let lastId: number | undefined
  for (const frame of text.split("\n\n")) {
    const id = /^id: (\d+)$/m.exec(frame)?.[1]
    const data = /^data: (.*)$/m.exec(frame)?.[1]
    if (data === undefined) continue
    const event = JSON.parse(data)
    if (event.stream === "stdout") stdout += event.data
    if (id !== undefined) lastId = Number(id)
    last = event
  }
  return { stdout, last, lastId }
}

/** The body of a raw chunked HTTP/1.1 response (the text is ASCII, so characters are bytes). */
function bodyOf(raw: string): string {
  let at = raw.indexOf("\r\n\r\n") + 4
  let body = ""
  for (;;) {
    const end = raw.indexOf("\r\n", at)
    const size = end < 0 ? 0 : Number.parseInt(raw.slice(at, end), 16)
    if (!(size > 0)) return body
    body += raw.slice(end + 2, end + 2 + size)
    at = end + 2 + size + 2
  }
}

/** A client that reads the response head, then stops reading (its socket paused, its receive window left to fill). */
function pausedClient(port: number, path: string): Promise<{ socket: Socket; text: () => string }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1")
    let text = ""
    socket.setEncoding("utf8")
    socket.on("data", (chunk: string) => {
      const first = text === ""
      text += chunk
      if (first) {
        socket.pause()
        resolve({ socket, text: () => text })
      }
    })
    socket.once("error", reject)
    socket.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`)
  })
}

/** A client that reads everything, as fast as it comes; resolves with the body once the server ends it. */
function readingClient(port: number, path: string, lastEventId?: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const headers = lastEventId === undefined ? {} : { "Last-Event-ID": String(lastEventId) }
    get({ host: "127.0.0.1", port, path, agent: false, headers }, (response) => {
      let body = ""
      response.setEncoding("utf8")
      response.on("data", (chunk: string) => {
        body += chunk
      })
      response.on("end", () => resolve(body))
      response.on("error", reject)
    }).on("error", reject)
  })
}

describe("a thousand clients following one run's output", () => {
  it("keeps memory bounded, drops clients that stop reading with a comment saying why, and gives readers everything", async () => {
    const server = await servers.start()
    const port = Number(new URL(server.url).port)
    const gate = join(server.cwd, "go")
    const shell = `while [ ! -e ${gate} ]; do sleep 0.1; done; yes '${line.trimEnd()}' | head -c ${totalBytes}`
    expect((await call(server.url, "PUT", "/api/pipelines/loud", { content: script(shell) })).status).toBe(201)
    const runId = (await call(server.url, "POST", "/api/pipelines/loud/trigger")).body.run_id
    await eventually(
      () => call(server.url, "GET", `/api/runs/${runId}`),
      (answer) => answer.body.status === "running",
      "the run is running",
    )
    const path = `/api/runs/${runId}/events`
    const baseline = await rssOf(server.child.pid ?? 0)

    // Connected in groups, so that the listen backlog never overflows.
    const paused: { socket: Socket; text: () => string }[] = []
    for (let i = 0; i < pausedClients; i += 100) {
      const group = Math.min(100, pausedClients - i)
      paused.push(...(await Promise.all(Array.from({ length: group }, () => pausedClient(port, path)))))
    }
    const readers = Array.from({ length: readingClients }, () => readingClient(port, path))
    let peak = baseline
    const sampler = setInterval(async () => {
      peak = Math.max(peak, await rssOf(server.child.pid ?? 0).catch(() => 0))
    }, 200)
    writeFileSync(gate, "")

    const bodies = await Promise.all(readers)
    clearInterval(sampler)
    peak = Math.max(peak, await rssOf(server.child.pid ?? 0))
    for (const body of bodies) {
      const { stdout, last } = parse(body)
      expect(stdout.length).toBe(totalBytes)
      expect(stdout === expected).toBe(true)
      expect(last).toEqual({ event: "exit", code: 0, run_id: runId })
    }
    // Streams that buffered the run would cost 8 MiB each, 8 GiB in all. Measured here: ≈+310 MiB, of which
    // ≈+150 MiB is the peak of handling a thousand requests (≈21 KiB each stays live) and the rest the run itself.
    const growthMiB = (peak - baseline) / (1 << 20)
    expect(growthMiB, `RSS grew ${growthMiB.toFixed(0)} MiB`).toBeLessThan(512)

    // The stalled clients read on: what they were sent, then a comment saying why they were dropped, then the end.
    const drops = await Promise.all(
      paused.map(async ({ socket, text }) => {
        const ended = new Promise((resolve) => socket.once("close", resolve))
        socket.resume()
        await ended
        return bodyOf(text())
      }),
    )
    for (const text of drops) {
      expect(text).toMatch(
        /\n: runnel: this client fell \d+ bytes behind the run's output while it read nothing; reconnect with Last-Event-ID: \d+ to go on from there\n\n$/,
      )
      expect(text).not.toContain('"event":"exit"')
    }
    // One of them does as the comment says, and gets the rest: nothing was lost.
    const first = drops[0] ?? ""
    const resumeAt = Number(/Last-Event-ID: (\d+)/.exec(first)?.[1])
    const before = parse(first)
    expect(before.lastId).toBe(resumeAt)
    const rest = parse(await readingClient(port, path, resumeAt))
    expect(before.stdout.length + rest.stdout.length).toBe(totalBytes)
    expect(before.stdout + rest.stdout === expected).toBe(true)
    expect(rest.last).toEqual({ event: "exit", code: 0, run_id: runId })
    expect((await call(server.url, "GET", "/readyz")).status).toBe(200)
  }, 180_000)
})
