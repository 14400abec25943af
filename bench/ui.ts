// The web UI in headless Chromium (Debian's): the pipelines page with 1,000 pipelines (first contentful
// paint, and the table filled), and a run page whose log has 1,000,000 lines (first contentful paint,
// "log visible": the first log line drawn, the whole log replayed, and the tab's JS heap after it).
// The floor is the first contentful paint of a one-line static page from a plain node:http server,
// measured in the same run, interleaved.
import { mkdtempSync, rmSync } from "node:fs"
import { createServer } from "node:http"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { Browser, Page } from "playwright-core"
import { createEmbeddedApi } from "../kubeserver/embedded-api.ts"
import { loadCrds } from "../kubeserver/resource-types.ts"
import { runnelApiVersion } from "../lib/kube/resources.ts"
import { launchChromium } from "../test/browser.ts"
import { median } from "./median.ts"
import type { BenchLine } from "./operator.ts"
import { startRunnelServer } from "./runnel-server.ts"

const crdsDir = join(import.meta.dirname, "..", "crds")

/** `count` pipelines (the page shows one more: the log pipeline) written into the embedded API's database before the server starts, as run-list.ts does. */
function seedPipelines(db: string, count: number): void {
  const api = createEmbeddedApi({ db, crds: loadCrds(crdsDir) })
  const type = api.resources.types.byPath(runnelApiVersion, "pipelines")
  if (type === undefined) throw new Error("the CRDs lack pipelines")
  for (let n = 0; n < count; n++) {
    api.resources.create(type, "default", {
      apiVersion: runnelApiVersion,
      kind: "Pipeline",
      metadata: { name: `pipeline-${String(n).padStart(4, "0")}` },
      spec: { content: "export const pipeline = async () => {}\n", contentType: "ts", driver: "native" },
    })
  }
  api.close()
}

/** A pipeline printing `lines` lines of about 60 characters. */
const printer = (lines: number) => `export const pipeline = async () => {
  await runtime.run({ name: "print", image: "busybox", command: { path: "sh", args: ["-c", "seq 1 ${lines} | sed 's/$/ compiling module with a typical amount of build output/'"] } })
}
`

/** The page's first contentful paint, ms from navigation start (waits for it if it has not happened yet). */
function fcp(page: Page): Promise<number> {
  return page.evaluate(`new Promise((resolve) => {
    new PerformanceObserver((list) => {
      const entry = list.getEntriesByName("first-contentful-paint")[0]
      if (entry !== undefined) resolve(entry.startTime)
    }).observe({ type: "paint", buffered: true })
  })`)
}

/** ms since the navigation started, read in the page. */
const pageNow = (page: Page) => page.evaluate(() => performance.now())

async function heapMb(page: Page): Promise<number> {
  const cdp = await page.context().newCDPSession(page)
  await cdp.send("HeapProfiler.collectGarbage")
  const { usedSize } = await cdp.send("Runtime.getHeapUsage")
  await cdp.detach()
  return usedSize / 2 ** 20
}

type Sample = {
  floor: number
  listFcp: number
  listFilled: number
  runFcp: number
  logVisible: number
  logAll: number
  heap: number
}

async function sample(
  browser: Browser,
  url: string,
  floorUrl: string,
  runId: string,
  pipelines: number,
): Promise<Sample> {
  const fresh = async () => (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage()
  const floorPage = await fresh()
  await floorPage.goto(floorUrl)
  const floor = await fcp(floorPage)
  await floorPage.context().close()

  const list = await fresh()
  await list.goto(`${url}/`)
  list.on("pageerror", (error) => console.error(`pipelines page: ${error.message}`))
  await list
    .waitForFunction(`document.querySelectorAll("tbody tr").length > ${pipelines}`, undefined, {
      timeout: 60_000,
      polling: "raf",
    })
    .catch(async (error) => {
      throw new Error(`the pipelines page did not fill: ${await list.locator("main").textContent()}`, { cause: error })
    })
  const listFilled = await pageNow(list)
  const listFcp = await fcp(list)
  await list.context().close()

  const run = await fresh()
  await run.goto(`${url}/runs/${runId}`)
  await run.waitForFunction('performance.getEntriesByName("runnel:log-visible").length > 0', undefined, {
    timeout: 60_000,
  })
  // Marked by the log view in the animation frame that draws its first lines.
  const logVisible = Number(await run.evaluate('performance.getEntriesByName("runnel:log-visible")[0].startTime'))
  const runFcp = await fcp(run)
  await run.waitForFunction('document.body.textContent.includes("The run ended with exit code")', undefined, {
    timeout: 300_000,
    polling: 100,
  })
  const logAll = await pageNow(run)
  const heap = await heapMb(run)
  await run.context().close()
  return { floor, listFcp, listFilled, runFcp, logVisible, logAll, heap }
}

export async function runUiBench(line: BenchLine, reps: number, pipelines = 1000, lines = 1_000_000): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "runnel-bench-ui-"))
  seedPipelines(join(dir, "runnel.db"), pipelines)
  const floorServer = createServer((_, res) => {
    res.writeHead(200, { "Content-Type": "text/html" })
    res.end("<!doctype html><title>floor</title><p>runnel</p>")
  })
  await new Promise<void>((resolve) => floorServer.listen(0, "127.0.0.1", resolve))
  const floorUrl = `http://127.0.0.1:${(floorServer.address() as { port: number }).port}/`
  const { url, stop } = await startRunnelServer(dir)
  const browser = await launchChromium()
  try {
    const put = await fetch(`${url}/api/pipelines/big-log`, {
      method: "PUT",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ content: printer(lines), content_type: "ts" }),
    })
    if (!put.ok) throw new Error(`storing the log pipeline answered ${put.status}: ${await put.text()}`)
    const { run_id: runId } = (await (
      await fetch(`${url}/api/pipelines/big-log/trigger`, { method: "POST" })
    ).json()) as {
      run_id: string
    }
    for (;;) {
      const { status } = (await (await fetch(`${url}/api/runs/${runId}`)).json()) as { status: string }
      if (status === "success") break
      if (["failure", "error", "aborted"].includes(status)) throw new Error(`the log pipeline ended ${status}`)
      await new Promise((resolve) => setTimeout(resolve, 200))
    }
    await sample(browser, url, floorUrl, runId, pipelines) // warm-up: the bundle is built on the first page
    const samples: Sample[] = []
    for (let rep = 0; rep < reps; rep++) samples.push(await sample(browser, url, floorUrl, runId, pipelines))
    const of = (key: keyof Sample) => samples.map((s) => s[key])
    const spread = (key: keyof Sample, unit = "ms") =>
      `${median(of(key)).toFixed(0)} ${unit} (${Math.min(...of(key)).toFixed(0)}-${Math.max(...of(key)).toFixed(0)})`
    const floor = spread("floor")
    line(
      `ui list ${pipelines} fcp`,
      spread("listFcp"),
      floor,
      `${(median(of("listFcp")) / median(of("floor"))).toFixed(2)}`,
      "< 1000 ms",
    )
    line(`ui list ${pipelines} rows`, spread("listFilled"), "-", "-", "table filled (informational)")
    line(
      `ui log ${lines / 1e6}M fcp`,
      spread("runFcp"),
      floor,
      `${(median(of("runFcp")) / median(of("floor"))).toFixed(2)}`,
      "< 1000 ms",
    )
    line(`ui log ${lines / 1e6}M visible`, spread("logVisible"), "-", "-", "< 2000 ms (first log line drawn)")
    line(`ui log ${lines / 1e6}M all`, spread("logAll"), "-", "-", "whole log replayed (informational)")
    line(`ui log ${lines / 1e6}M heap`, spread("heap", "MB"), "-", "-", "< 200 MB JS heap after the whole log")
  } finally {
    await browser.close()
    await stop()
    floorServer.close()
    rmSync(dir, { recursive: true, force: true })
  }
}

if (import.meta.main) {
  await runUiBench(
    (...cells) => console.log(cells.join("  ")),
    Number(process.env.BENCH_REPS ?? 3),
    Number(process.env.BENCH_PIPELINES ?? 1000),
    Number(process.env.BENCH_LINES ?? 1_000_000),
  )
}
