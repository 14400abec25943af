import { afterAll, describe, expect, it } from "vitest"
import { call, eventually, script, serverProcesses } from "./server-process.ts"

const servers = serverProcesses("runnel-queue-flood-test-")
afterAll(() => servers.cleanUp())

const maxInFlight = 2
const maxQueueSize = 5
const flood = 30

describe("a flood of triggers", () => {
  it("admits no more than the queue holds, loses and duplicates none, and runs every admitted one", async () => {
    const server = await servers.start([
      "--max-in-flight",
      String(maxInFlight),
      "--max-queue-size",
      String(maxQueueSize),
    ])
    const api = (method: string, path: string, body?: unknown) => call(server.url, method, path, body)
    expect((await api("PUT", "/api/pipelines/sleepy", { content: script("sleep 1") })).status).toBe(201)

    // Fill the in-flight slots first: these are running, not queued, when the flood arrives.
    const first: string[] = []
    for (let i = 0; i < maxInFlight; i++) first.push((await api("POST", "/api/pipelines/sleepy/trigger")).body.run_id)
    await eventually(
      () => Promise.all(first.map((id) => api("GET", `/api/runs/${id}`))),
      (answers) => answers.every((answer) => answer.body.status === "running"),
      "the first runs are running",
    )

    const answers = await Promise.all(Array.from({ length: flood }, () => api("POST", "/api/pipelines/sleepy/trigger")))
    const floodEnd = Date.now()
    const admitted = answers.filter((answer) => answer.status === 202).map((answer) => answer.body.run_id as string)
    const refused = answers.filter((answer) => answer.status !== 202)
    for (const answer of refused) {
      expect(answer.status).toBe(503)
      expect(answer.body.error).toMatch(/^the run queue is full \(\d+ queued runs, --max-queue-size 5\)/)
    }
    expect(new Set(admitted).size).toBe(admitted.length)

    // Exactly the admitted runs exist: none lost, none duplicated, nothing created for a 503.
    const all = [...first, ...admitted]
    const listed = (await api("GET", "/api/runs?per_page=100")).body
    expect(listed.total_items).toBe(all.length)
    expect(listed.items.map((run: { id: string }) => run.id).sort()).toEqual([...all].sort())

    const runs = await Promise.all(
      all.map(
        async (id) =>
          (
            await eventually(
              () => api("GET", `/api/runs/${id}`),
              (answer) => ["success", "failure", "error", "aborted"].includes(answer.body.status),
              `run ${id} finishes`,
              60_000,
            )
          ).body,
      ),
    )
    for (const run of runs) expect(run.status).toBe("success")

    // A trigger is refused only when maxQueueSize Runs are queued, so at least that many got in. A
    // trigger is admitted only while fewer are queued, so beyond maxQueueSize only runs that left
    // the queue (started) during the flood made room; starting needs a free slot, so a flood run
    // started then only after one of the first runs finished: at most maxInFlight of them.
    const startedDuringFlood = runs.filter(
      (run) => admitted.includes(run.id) && Date.parse(run.started_at) <= floodEnd,
    ).length
    expect(admitted.length).toBeGreaterThanOrEqual(maxQueueSize)
    expect(admitted.length).toBeLessThanOrEqual(maxQueueSize + startedDuringFlood)
    expect(startedDuringFlood).toBeLessThanOrEqual(maxInFlight)
    expect(refused.length).toBe(flood - admitted.length)
    server.child.kill("SIGTERM")
  }, 120_000)
})
