// MCP search over a seeded log store: search_tasks latency p50/p95 for a rare and a common word through
// POST /mcp of `runnel server`, how long a just-written line takes to become searchable while output
// keeps coming, and webhook p99 with and without searches running beside it (issue 13, "Speed").
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { openSqliteLogStore } from "../lib/logs/sqlite-log-store.ts"
import { searchBeside, searchTasks } from "./mcp-search.ts"
import type { BenchLine } from "./operator.ts"
import { startRunnelServer } from "./runnel-server.ts"
import { load, storeResponder } from "./webhooks.ts"

const rareWord = "quetzalcoatl"
const commonWord = "info"
/** Searches beside the webhooks: 2 at a time, 20 a second, more than a team's assistants ask. */
const searchLoad = { concurrency: 2, intervalMs: 100 }
const nextTurn = () => new Promise((resolve) => setImmediate(resolve))
const percentile = (values: readonly number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))] ?? Number.NaN
}

/** Build-log-like lines: a timestamp, a level, a varied message; the rare word in three lines of the whole store. */
function* lines(total: number): Generator<string> {
  const verbs = ["compiling", "linking", "fetching", "resolving", "testing", "bundling", "pushing", "caching"]
  const nouns = Array.from({ length: 3000 }, (_, i) => `mod${((i * 2654435761) % 99991).toString(36)}`)
  let chars = 0
  for (let i = 0; chars < total; i++) {
    const level = i % 50 === 0 ? "WARN" : i % 97 === 0 ? "ERROR" : commonWord.toUpperCase()
    const rare = i % Math.floor(total / 300) === 17 && i < total / 50 ? ` ${rareWord}` : ""
    const line = `2026-01-01T00:${String(Math.floor(i / 60) % 60).padStart(2, "0")}:${String(i % 60).padStart(2, "0")}Z [${level}] ${verbs[i % verbs.length]} ${nouns[(i * 7) % nouns.length]} ${nouns[(i * 13) % nouns.length]} in ${(i % 997) / 10} ms${rare} sha=${(i * 40503).toString(16)}\n`
    chars += line.length
    yield line
  }
}

/** Fills `path` with `megabytes` of task output over many runs of four tasks, and waits for the index. */
async function seed(path: string, megabytes: number): Promise<{ runs: number; seconds: number }> {
  const store = await openSqliteLogStore(path)
  const started = performance.now()
  const perTask = 64 << 10
  let run = 0
  let task = 0
  let taskChars = 0
  let batch = ""
  let n = 0
  for (const line of lines(megabytes * 1e6)) {
    batch += line
    if (batch.length < 8192) continue
    store.append(`run-${run}`, `tasks/${task + 1}/step${task}`, task % 2 === 0 ? "stdout" : "stderr", batch)
    taskChars += batch.length
    batch = ""
    if (taskChars >= perTask) {
      taskChars = 0
      task = (task + 1) % 4
      if (task === 0) run++
    }
    if (++n % 16 === 0) await nextTurn()
  }
  await store.close()
  return { runs: run + 1, seconds: (performance.now() - started) / 1000 }
}

/** How long a line appended to one store takes to be found by another on the same file, while output keeps coming. */
async function timeToSearchable(path: string, samples: number): Promise<number[]> {
  const [writer, reader] = await Promise.all([openSqliteLogStore(path), openSqliteLogStore(path)])
  let writing = true
  const background = (async () => {
    const source = lines(Number.MAX_SAFE_INTEGER)
    while (writing) {
      for (let i = 0; i < 20; i++) writer.append("busy", "tasks/1/noise", "stdout", source.next().value ?? "")
      await new Promise((resolve) => setTimeout(resolve, 5))
    }
  })()
  const times: number[] = []
  try {
    for (let s = 0; s < samples; s++) {
      const marker = `marker${s}x${Date.now().toString(36)}`
      const written = performance.now()
      writer.append(`fresh-${s}`, "tasks/1/step", "stdout", `${marker} just written\n`)
      for (;;) {
        if ((await reader.search({ query: marker })).hits.length > 0) break
        if (performance.now() - written > 60_000) throw new Error(`${marker} was not searchable within 60 s`)
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
      times.push(performance.now() - written)
    }
  } finally {
    writing = false
    await background
    await Promise.all([writer.close(), reader.close()])
  }
  return times
}

export async function runMcpBench(line: BenchLine, megabytes: number): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "runnel-bench-mcp-"))
  try {
    const seeded = await seed(join(dir, "runnel-logs.db"), megabytes)
    line(
      "mcp seed",
      `${megabytes} MB, ${seeded.runs} runs`,
      "-",
      "-",
      `stored and indexed in ${seeded.seconds.toFixed(0)} s`,
    )
    const { url, stop } = await startRunnelServer(dir, ["--max-queue-size", "1000"])
    try {
      const search = (query: string) => searchTasks(url, query)
      for (const [name, word] of [
        ["rare word", rareWord],
        ["common word", commonWord],
      ] as const) {
        await search(word)
        const times: number[] = []
        for (let i = 0; i < 40; i++) times.push(await search(word))
        line(
          `search ${name}`,
          `p50 ${percentile(times, 50).toFixed(1)} p95 ${percentile(times, 95).toFixed(1)} ms`,
          "-",
          "-",
          `p95 < 100 ms (search_tasks "${word}" over ${megabytes} MB, POST /mcp)`,
        )
      }

      const hook = await storeResponder(url)
      await load(hook, 40, 4) // warm-up
      const quiet: number[] = []
      const busy: number[] = []
      let searchesPerSecond = 0
      // Interleaved, so that drift on a shared machine hits both alike.
      for (let rep = 0; rep < 3; rep++) {
        quiet.push((await load(hook, 200, 16)).p99)
        const searching = searchBeside(url, commonWord, searchLoad)
        const started = performance.now()
        busy.push((await load(hook, 200, 16)).p99)
        searchesPerSecond += (await searching.stop()) / ((performance.now() - started) / 1000) / 3
      }
      const [without, withSearches] = [quiet, busy].map((values) => percentile(values, 50))
      line(
        "webhook p99",
        `${withSearches?.toFixed(1)} ms searching`,
        `${without?.toFixed(1)} ms quiet`,
        `${((withSearches ?? 0) / (without ?? 1)).toFixed(2)}`,
        `<= 1.20 (16 webhooks at a time; common-word searches, 2 at a time from another thread, ${searchesPerSecond.toFixed(0)}/s)`,
      )
    } finally {
      await stop()
    }
    const lag = await timeToSearchable(join(dir, "runnel-logs.db"), 5)
    line(
      "time to searchable",
      `median ${percentile(lag, 50).toFixed(0)} max ${Math.max(...lag).toFixed(0)} ms`,
      "-",
      "-",
      "a few seconds (a line appended while output keeps coming, found by another store on the file)",
    )
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

if (import.meta.main) {
  await runMcpBench((...cells) => console.log(cells.join("  ")), Number(process.env.BENCH_MCP_MB ?? 1024))
}
