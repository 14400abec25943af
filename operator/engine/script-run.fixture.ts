import { mkdtempSync, rmSync } from "node:fs"
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { OutputStream, RunResult, TaskRecord } from "../../lib/core/run.ts"
import type { LogStore } from "../../lib/logs/log-store.ts"
import { openSqliteLogStore } from "../../lib/logs/sqlite-log-store.ts"
import { type SecretResolver, staticSecrets } from "../../lib/secrets/secret-resolver.ts"
import type { Driver } from "../drivers/driver.ts"
import { defaultNetworkSettings, type NetworkSettings, runScript } from "./engine.ts"
import type { RunObserver } from "./run-observer.ts"

/** What a test sees of a run: its result, the live events in order, and each task's stored output. */
export type ScriptOutcome = {
  readonly result: RunResult
  readonly events: readonly string[]
  readonly output: (path: string, stream?: OutputStream) => string
}

class Recorder implements RunObserver {
  readonly events: string[] = []
  taskStarted(task: TaskRecord) {
    this.events.push(`started ${task.path}`)
  }
  output(path: string, stream: OutputStream, text: string) {
    this.events.push(`${path} ${stream}: ${text}`)
  }
  taskFinished(task: TaskRecord) {
    this.events.push(`finished ${task.path} ${task.status}`)
  }
  runFinished() {}
}

/** Runs scripts with the real engine on a driver and a SQLite log store in a temp directory. */
export async function scriptRunner(driver: Driver, driverName: string) {
  const dir = mkdtempSync(join(tmpdir(), "runnel-script-run-"))
  const store: LogStore = await openSqliteLogStore(join(dir, "runnel.db"))
  let runs = 0
  return {
    async run(
      source: string,
      options: { secrets?: SecretResolver; network?: Partial<NetworkSettings>; pipelineName?: string } = {},
    ): Promise<ScriptOutcome> {
      const observer = new Recorder()
      const runId = `script-run-${process.pid}-${++runs}`
      const result = await runScript(
        {
          runId,
          pipelineId: "p1",
          pipelineName: options.pipelineName ?? "network-test",
          filename: "pipeline.ts",
          source,
          triggeredBy: "manual",
          args: [],
        },
        {
          driver,
          driverName,
          store,
          secrets: options.secrets ?? staticSecrets({}),
          observer,
          limits: { memoryMb: 128, timeoutMs: 120_000 },
          network: { ...defaultNetworkSettings, ...options.network },
        },
        new AbortController().signal,
      )
      return {
        result,
        events: observer.events,
        output: (path, stream = "stdout") => store.output(runId, path, stream),
      }
    },
    async close() {
      await store.close()
      await driver.close()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

/** A request a test server received, its body read whole. */
export type Received = {
  readonly method: string
  readonly url: string
  readonly headers: IncomingMessage["headers"]
  readonly body: string
  readonly at: number
}

/** An HTTP server on loopback that records every request and answers with `handle`. */
export async function testServer(
  handle: (request: Received, response: ServerResponse, index: number) => unknown,
): Promise<{ url: string; received: Received[]; server: Server; close(): Promise<void> }> {
  const received: Received[] = []
  const server = createServer(async (request, response) => {
    const chunks: Buffer[] = []
    for await (const chunk of request) chunks.push(chunk as Buffer)
    const entry = {
      method: request.method ?? "",
      url: request.url ?? "",
      headers: request.headers,
      body: Buffer.concat(chunks).toString("utf8"),
      at: Date.now(),
    }
    received.push(entry)
    try {
      await handle(entry, response, received.length - 1)
    } catch (error) {
      response.destroy(error as Error)
    }
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    received,
    server,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}
