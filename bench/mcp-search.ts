// search_tasks through POST /mcp, and a thread that keeps searching beside another load (bench/mcp.ts).
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads"

/** One search_tasks call through POST /mcp; answers its latency in ms. */
export async function searchTasks(url: string, query: string): Promise<number> {
  const started = performance.now()
  const response = await fetch(`${url}/mcp`, {
    method: "POST",
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "tools/call",
      params: { name: "search_tasks", arguments: { query } },
    }),
  })
  const answer = (await response.json()) as { result?: { isError?: boolean } }
  if (response.status !== 200 || answer.result?.isError === true)
    throw new Error(`search answered ${JSON.stringify(answer)}`)
  return performance.now() - started
}

type SearcherData = { role: "searcher"; url: string; query: string; concurrency: number; intervalMs: number }

/**
 * Searches for `query`, `concurrency` at a time, each searcher starting one search at most every
 * `intervalMs`, on a thread of its own: the event loop that sends the other load and times it waits
 * on none of them. A fixed pace, since back-to-back searches would come faster the faster search
 * gets, measuring how fast it is rather than what it costs the rest. stop() answers how many were made.
 */
export function searchBeside(
  url: string,
  query: string,
  { concurrency, intervalMs }: { concurrency: number; intervalMs: number },
): { stop(): Promise<number> } {
  const worker = new Worker(new URL(import.meta.url), {
    workerData: { role: "searcher", url, query, concurrency, intervalMs } satisfies SearcherData,
  })
  const done = new Promise<number>((resolve, reject) => {
    worker.once("message", resolve)
    worker.once("error", reject)
  })
  return {
    stop() {
      worker.postMessage("stop")
      return done
    },
  }
}

if (!isMainThread && (workerData as SearcherData | undefined)?.role === "searcher") {
  const { url, query, concurrency, intervalMs } = workerData as SearcherData
  let searching = true
  let count = 0
  parentPort?.once("message", () => {
    searching = false
  })
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (searching) {
        const next = performance.now() + intervalMs
        await searchTasks(url, query)
        count++
        await new Promise((resolve) => setTimeout(resolve, Math.max(0, next - performance.now())))
      }
    }),
  )
  parentPort?.postMessage(count)
}
