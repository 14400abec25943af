// Signed GitHub webhooks through `runnel server` to a pipeline that answers with http.respond() first:
// webhooks per second and p99 latency on loopback, against the floor of a bare node:http server that
// verifies the same HMAC and inserts one SQLite row per request, measured in the same run.
import { createHmac, timingSafeEqual } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { DatabaseSync } from "node:sqlite"
import type { BenchLine } from "./operator.ts"
import { startRunnelServer } from "./runnel-server.ts"

export const secret = "bench-webhook-secret"
export const body = JSON.stringify({ ref: "refs/heads/main", repository: { full_name: "runnel/bench" } })
const signature = `sha256=${createHmac("sha256", secret).update(body).digest("hex")}`
export const headers = {
  "Content-Type": "application/json",
  "X-GitHub-Event": "push",
  "X-Hub-Signature-256": signature,
}
const responder = `export const pipeline = async () => {
  http.respond({ status: 200, body: { ok: true } })
}
`

function startFloor(dir: string): Promise<Server> {
  const db = new DatabaseSync(join(dir, "floor.db"))
  db.exec(
    "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; CREATE TABLE hooks (id INTEGER PRIMARY KEY, body TEXT)",
  )
  const insert = db.prepare("INSERT INTO hooks (body) VALUES (?)")
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => {
      const raw = Buffer.concat(chunks)
      const expected = Buffer.from(`sha256=${createHmac("sha256", secret).update(raw).digest("hex")}`)
      const given = Buffer.from(String(req.headers["x-hub-signature-256"] ?? ""))
      if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
        res.writeHead(401).end()
        return
      }
      insert.run(raw.toString("utf8"))
      res.writeHead(200, { "content-type": "application/json" }).end('{"ok":true}')
    })
  })
  server.on("close", () => db.close())
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)))
}

/** Stores the `responder` pipeline, `hooked`, with the bench's webhook secret; answers its webhook URL. */
export async function storeResponder(url: string): Promise<string> {
  const put = await fetch(`${url}/api/pipelines/hooked`, {
    method: "PUT",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ content: responder, webhook_secret: secret }),
  })
  if (!put.ok) throw new Error(`storing the bench pipeline failed: ${await put.text()}`)
  return `${url}/api/webhooks/hooked`
}

/** `count` requests, `concurrency` at a time: requests per second and the p99 latency. */
export async function load(
  url: string,
  count: number,
  concurrency: number,
): Promise<{ perSecond: number; p99: number }> {
  const latencies: number[] = []
  let next = 0
  const started = performance.now()
  const worker = async () => {
    while (next < count) {
      next++
      const sent = performance.now()
      const response = await fetch(url, { method: "POST", headers, body })
      const text = await response.text()
      if (response.status !== 200) throw new Error(`webhook answered ${response.status}: ${text.slice(0, 200)}`)
      latencies.push(performance.now() - sent)
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker))
  const seconds = (performance.now() - started) / 1000
  latencies.sort((a, b) => a - b)
  return { perSecond: count / seconds, p99: latencies[Math.floor(latencies.length * 0.99)] ?? Number.NaN }
}

export async function runWebhookBench(line: BenchLine, count = 300): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "runnel-bench-webhooks-"))
  const { url, stop } = await startRunnelServer(dir, ["--max-queue-size", "1000"])
  const floor = await startFloor(dir)
  try {
    const floorUrl = `http://127.0.0.1:${(floor.address() as AddressInfo).port}/`
    const hook = await storeResponder(url)
    await load(hook, 20, 4) // warm-up
    await load(floorUrl, 200, 4)
    const bare = await load(floorUrl, count * 4, 16)
    const runnel = await load(hook, count, 16)
    line(
      "webhooks/s",
      `${runnel.perSecond.toFixed(0)}/s p99 ${runnel.p99.toFixed(0)} ms`,
      `${bare.perSecond.toFixed(0)}/s p99 ${bare.p99.toFixed(1)} ms`,
      `${(runnel.perSecond / bare.perSecond).toFixed(3)}`,
      ">= 300/s, p99 < 100 ms (signed GitHub push, http.respond() first, 16 at once)",
    )
  } finally {
    floor.close()
    await stop()
    rmSync(dir, { recursive: true, force: true })
  }
}

if (import.meta.main) {
  await runWebhookBench((...cells) => console.log(cells.join("  ")), Number(process.env.BENCH_WEBHOOKS ?? 300))
}
