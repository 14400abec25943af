import { once } from "node:events"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { connect, type Socket } from "node:net"
import { afterEach, describe, expect, it } from "vitest"
import { openSse, type SseWriter } from "./sse.ts"

let server: Server | undefined
afterEach(() => {
  server?.closeAllConnections()
  server?.close()
})

/** A server whose one stream is handed to the test; the client is a raw socket that reads only when told. */
async function serve(heartbeat: number): Promise<{ port: number; writer: Promise<SseWriter> }> {
  let handed: (writer: SseWriter) => void = () => {}
  const writer = new Promise<SseWriter>((resolve) => {
    handed = resolve
  })
  server = createServer((_req, res) => handed(openSse(res, { heartbeat })))
  server.listen(0, "127.0.0.1")
  await once(server, "listening")
  return { port: (server.address() as AddressInfo).port, writer }
}

/** A stream to a raw socket that has sent its request and reads nothing. */
async function pausedClient(): Promise<{ socket: Socket; sse: SseWriter }> {
  const { port, writer } = await serve(60_000)
  const socket = connect(port, "127.0.0.1")
  socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
  socket.pause()
  return { socket, sse: await writer }
}

describe("SSE writer", () => {
  it("writes one data line per event with its id, and heartbeat comments", async () => {
    const { port, writer } = await serve(20)
    const socket = connect(port, "127.0.0.1")
    socket.write("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    let text = ""
    socket.setEncoding("utf8").on("data", (chunk: string) => {
      text += chunk
    })
    const sse = await writer
    await sse.send({ stream: "stdout", data: "two\nlines\n" }, 7)
    await new Promise((resolve) => setTimeout(resolve, 100))
    sse.end()
    await once(socket, "end")
    expect(text).toMatch(/content-type: text\/event-stream/i)
    expect(text).toContain('id: 7\ndata: {"stream":"stdout","data":"two\\nlines\\n"}\n\n')
    expect(text).toContain(": heartbeat\n\n")
  })

  it("waits for a client that does not read, and stops waiting when it leaves", async () => {
    const { socket, sse } = await pausedClient()
    const event = { stream: "stdout", data: "x".repeat(64 * 1024) }
    let sent = 0
    let blocked = false
    while (!blocked && sent < 10_000) {
      const write = sse.send(event, sent)
      const done = await Promise.race([write.then(() => true), new Promise((r) => setTimeout(() => r(false), 50))])
      sent++
      if (!done) {
        blocked = true
        expect(sse.signal.aborted).toBe(false)
        socket.destroy()
        await write // resolves once the client is gone
        expect(sse.signal.aborted).toBe(true)
      }
    }
    expect(blocked).toBe(true)
    expect(sent).toBeLessThan(1_000) // bounded by socket buffers, not by the number of events
  })

  it("is aborted from the start when its client left before it opened (a route that awaited first)", async () => {
    let opened: (writer: SseWriter) => void = () => {}
    const writer = new Promise<SseWriter>((resolve) => {
      opened = resolve
    })
    server = createServer((_req, res) => res.once("close", () => opened(openSse(res))))
    server.listen(0, "127.0.0.1")
    await once(server, "listening")
    const socket = connect((server.address() as AddressInfo).port, "127.0.0.1")
    socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    await new Promise((resolve) => setTimeout(resolve, 50))
    socket.destroy()
    expect((await writer).signal.aborted).toBe(true)
  })

  it("drops a client that does not read with a comment after what it was sent, then ends the stream", async () => {
    const { socket, sse } = await pausedClient()
    let sent = 0
    // The kernel's buffers take some before the writer's stays full.
    do {
      while (sse.write({ stream: "stdout", data: "y".repeat(16 * 1024) }, ++sent)) {}
    } while (await sse.drained(50))
    expect(sent).toBeLessThan(1_000)
    sse.drop("runnel: this client fell behind; reconnect with Last-Event-ID")
    expect(sse.signal.aborted).toBe(true)
    let text = ""
    socket.setEncoding("utf8").on("data", (chunk: string) => {
      text += chunk
    })
    socket.resume()
    await once(socket, "end")
    expect(text).toContain(`id: ${sent}\ndata: `)
    expect(text).toMatch(/: runnel: this client fell behind; reconnect with Last-Event-ID\n\n\r\n0\r\n\r\n$/)
  })
})
