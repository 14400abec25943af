// GET /api/runs with 100k runs: page latency p50/p99 of `runnel server` against listing one page of
// the same Run resources from its embedded Kubernetes API directly (GET /k8s/...runs?limit=20), the
// floor, measured in the same run on the same server.
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { createEmbeddedApi } from "../kubeserver/embedded-api.ts"
import { loadCrds } from "../kubeserver/resource-types.ts"
import { pipelineLabel, pipelineOwnerReference, resourcePath, runnelApiVersion } from "../lib/kube/resources.ts"
import type { BenchLine } from "./operator.ts"
import { startRunnelServer, untilIdle } from "./runnel-server.ts"
import { load, storeResponder } from "./webhooks.ts"

const crdsDir = join(import.meta.dirname, "..", "crds")
const phases = ["success", "failure", "error", "aborted"] as const

/**
 * Writes `count` finished Runs of `pipelines` pipelines into the embedded API's database in
 * process (through its resource verbs, as its HTTP handler would), so the server starts on them.
 */
function seed(db: string, count: number, pipelines: number): void {
  const api = createEmbeddedApi({ db, crds: loadCrds(crdsDir) })
  const type = (plural: string) => {
    const found = api.resources.types.byPath(runnelApiVersion, plural)
    if (found === undefined) throw new Error(`the CRDs lack ${plural}`)
    return found
  }
  const pipelineType = type("pipelines")
  const runType = type("runs")
  const owners = Array.from({ length: pipelines }, (_, n) => {
    const { object } = api.resources.create(pipelineType, "default", {
      apiVersion: runnelApiVersion,
      kind: "Pipeline",
      metadata: { name: `p${n}` },
      spec: { content: "export const pipeline = async () => {}\n", contentType: "ts", driver: "native" },
    })
    return object
  })
  for (let n = 0; n < count; n++) {
    const owner = owners[n % pipelines]
    if (owner === undefined) throw new Error("no pipeline to own the runs")
    const name = `run-${n.toString(36).padStart(6, "0")}`
    api.resources.create(runType, "default", {
      apiVersion: runnelApiVersion,
      kind: "Run",
      metadata: {
        name,
        labels: { [pipelineLabel]: owner.metadata.name },
        ownerReferences: [pipelineOwnerReference(owner)],
      },
      spec: { pipelineRef: { name: owner.metadata.name }, trigger: { type: "manual", by: "anonymous", args: [] } },
    })
    const phase = phases[n % phases.length] ?? "success"
    const at = new Date(Date.UTC(2026, 0, 1) + n * 1000).toISOString()
    api.resources.patch(
      runType,
      "default",
      name,
      "application/merge-patch+json",
      { status: { phase, code: phase === "success" ? 0 : 1, message: "", startedAt: at, finishedAt: at, tasks: [] } },
      { subresource: "status" },
    )
  }
  api.close()
}

async function timed(url: string): Promise<number> {
  const started = performance.now()
  const response = await fetch(url)
  const body = await response.text()
  if (!response.ok) throw new Error(`${url} answered ${response.status}: ${body.slice(0, 300)}`)
  return performance.now() - started
}

const percentile = (values: readonly number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))] ?? Number.NaN
}

export async function runListBench(line: BenchLine, count = 100_000): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "runnel-bench-list-"))
  const seedStarted = performance.now()
  seed(join(dir, "runnel.db"), count, 20)
  const seedSeconds = (performance.now() - seedStarted) / 1000
  // Every seeded run is kept: the default --keep-runs (1000 per pipeline) would delete four in five of them at start.
  const { url, pid, stop } = await startRunnelServer(dir, ["--keep-runs", "0"])
  try {
    await untilIdle(pid)
    const floorUrl = `${url}/k8s${resourcePath("default", "runs")}?limit=20`
    const pages = Math.ceil(count / 20)
    const queries = [
      () => `${url}/api/runs?page=${1 + Math.floor(Math.random() * pages)}&per_page=20`,
      () => `${url}/api/runs?status=failure&page=${1 + Math.floor(Math.random() * 100)}`,
      () => `${url}/api/runs?pipeline_id=p${Math.floor(Math.random() * 20)}&page=2`,
    ]
    for (let n = 0; n < 20; n++) {
      await timed(floorUrl)
      await timed(queries[0]?.() ?? url)
    }
    const runnel: number[] = []
    const floor: number[] = []
    for (let n = 0; n < 300; n++) {
      floor.push(await timed(floorUrl))
      runnel.push(await timed(queries[n % queries.length]?.() ?? url))
    }
    line(
      `runs list ${count / 1000}k`,
      `p50 ${percentile(runnel, 50).toFixed(2)} p99 ${percentile(runnel, 99).toFixed(2)} ms`,
      `p50 ${percentile(floor, 50).toFixed(2)} p99 ${percentile(floor, 99).toFixed(2)} ms`,
      `${(percentile(runnel, 99) / percentile(floor, 99)).toFixed(2)} at p99`,
      `p99 < 10 ms (random pages, ?status, ?pipeline_id; floor: one page from /k8s; seeded in ${seedSeconds.toFixed(0)} s)`,
    )
    // The same server with its 100,000 Runs: what a run costs must not grow with the history kept (the
    // operator's passes and retention look at unfinished Runs and due Pipelines, not at every stored Run).
    const hook = await storeResponder(url)
    await load(hook, 20, 4) // warm-up
    const hooks = await load(hook, 300, 16)
    line(
      `webhooks/s, ${count / 1000}k runs`,
      `${hooks.perSecond.toFixed(0)}/s p99 ${hooks.p99.toFixed(0)} ms`,
      "-",
      "-",
      "about the webhooks/s row's, on an empty store (the same 300 signed webhooks, 16 at once)",
    )
  } finally {
    await stop()
    rmSync(dir, { recursive: true, force: true })
  }
}

if (import.meta.main) {
  await runListBench((...cells) => console.log(cells.join("  ")), Number(process.env.BENCH_RUNS ?? 100_000))
}
