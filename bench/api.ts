// The API server's cost per run: a no-op script pipeline run over HTTP (POST /api/pipelines/:name/run,
// following its SSE stream to the exit event), at concurrency 1 and 8, against the floor of a bare
// node:http server that inserts one SQLite row per request, measured in the same run.
import { mkdtempSync, rmSync } from "node:fs"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { DatabaseSync } from "node:sqlite"
import { median } from "./median.ts"
import type { BenchLine } from "./operator.ts"
import { startRunnelServer } from "./runnel-server.ts"

function startFloor(dir: string): Promise<Server> {
  const db = new DatabaseSync(join(dir, "floor.db"))
  db.exec(
    "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; CREATE TABLE runs (id INTEGER PRIMARY KEY, body TEXT)",
  )
  const insert = db.prepare("INSERT INTO runs (body) VALUES (?)")
  const server = createServer((req, res) => {
    let body = ""
    req.on("data", (chunk) => {
      body += chunk
    })
    req.on("end", () => {
      const { lastInsertRowid } = insert.run(body)
      res
        .writeHead(202, { "content-type": "application/json" })
        .end(JSON.stringify({ run_id: String(lastInsertRowid) }))
    })
  })
  server.on("close", () => db.close())
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)))
}

/** One run over HTTP: the whole SSE stream read to its exit event. */
async function runOnce(url: string): Promise<number> {
  const started = performance.now()
  const response = await fetch(`${url}/api/pipelines/noop/run`, { method: "POST" })
  const text = await response.text()
  if (!text.includes('"event":"exit","code":0')) throw new Error(`bench run did not succeed: ${text.slice(0, 300)}`)
  return performance.now() - started
}

async function floorOnce(url: string): Promise<number> {
  const started = performance.now()
  const response = await fetch(url, { method: "POST", body: "{}" })
  await response.text()
  return performance.now() - started
}

async function concurrently(count: number, once: () => Promise<number>): Promise<number[]> {
  return Promise.all(Array.from({ length: count }, once))
}

export async function runApiBench(line: BenchLine, reps: number): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "runnel-bench-api-"))
  const { url, stop } = await startRunnelServer(dir)
  const floor = await startFloor(dir)
  const floorUrl = `http://127.0.0.1:${(floor.address() as AddressInfo).port}/`
  try {
    const put = await fetch(`${url}/api/pipelines/noop`, {
      method: "PUT",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        content: "export const pipeline = async () => {}\n",
        content_type: "ts",
        driver: "native",
      }),
    })
    if (!put.ok) throw new Error(`storing the bench pipeline failed: ${await put.text()}`)
    for (let n = 0; n < 5; n++) await runOnce(url) // warm-up
    for (const concurrency of [1, 8]) {
      const runnel: number[] = []
      const bare: number[] = []
      for (let rep = 0; rep < reps * 4; rep++) {
        bare.push(...(await concurrently(concurrency, () => floorOnce(floorUrl))))
        runnel.push(...(await concurrently(concurrency, () => runOnce(url))))
      }
      const overhead = median(runnel) - median(bare)
      line(
        `api run c=${concurrency}`,
        `${median(runnel).toFixed(1)} ms median`,
        `${median(bare).toFixed(1)} ms node:http+row`,
        `+${overhead.toFixed(1)} ms`,
        "< 25 ms median overhead per run (trigger over HTTP, follow SSE to success)",
      )
    }
  } finally {
    floor.close()
    await stop()
    rmSync(dir, { recursive: true, force: true })
  }
}
