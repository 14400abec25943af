import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { setTimeout as sleep } from "node:timers/promises"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { OutputStream, RunResult, TaskRecord } from "../../lib/core/run.ts"
import type { LogStore } from "../../lib/logs/log-store.ts"
import { openSqliteLogStore } from "../../lib/logs/sqlite-log-store.ts"
import { staticSecrets } from "../../lib/secrets/secret-resolver.ts"
import { nativeDriverFactory } from "../drivers/native/native-driver.ts"
import { runScript } from "./engine.ts"
import { journalFromStore } from "./journal.ts"
import type { TaskResult } from "./run-context.ts"
import type { RunObserver } from "./run-observer.ts"

// The engine with real parts: the native driver, a SQLite log store on a temp file.
const dir = mkdtempSync(join(tmpdir(), "runnel-engine-test-"))
const workRoot = join(dir, "work")
const driver = nativeDriverFactory({ workRoot, path: "/usr/local/bin:/usr/bin:/bin" }).create({})
let store: LogStore
beforeAll(async () => {
  store = await openSqliteLogStore(join(dir, "runnel.db"))
})
afterAll(async () => {
  await store.close()
  await driver.close()
  rmSync(dir, { recursive: true, force: true })
})

class Recorder implements RunObserver {
  readonly events: string[] = []
  readonly live: Record<string, string> = {}
  /** Live output beyond this is counted, not kept, so a test of a huge output measures the engine, not the recorder. */
  static keepChars = 1 << 20
  result: RunResult | undefined
  taskStarted(task: TaskRecord) {
    this.events.push(`started ${task.path}`)
  }
  output(path: string, stream: OutputStream, text: string) {
    const key = `${path} ${stream}`
    const live = this.live[key] ?? ""
    if (live.length < Recorder.keepChars) this.live[key] = live + text
  }
  taskFinished(task: TaskRecord) {
    this.events.push(`finished ${task.path} ${task.status} ${task.code}`)
  }
  runFinished(result: RunResult) {
    this.result = result
  }
}

let runs = 0
async function run(
  source: string,
  options: {
    secrets?: Record<string, string>
    signal?: AbortSignal
    runId?: string
    journal?: Map<string, TaskResult>
  } = {},
) {
  const observer = new Recorder()
  const result = await runScript(
    {
      runId: options.runId ?? `engine-test-${++runs}`,
      ...(options.journal === undefined ? {} : { journal: options.journal }),
      pipelineId: "p1",
      pipelineName: "engine-test",
      filename: "pipeline.ts",
      source,
      triggeredBy: "manual",
      args: ["x"],
    },
    {
      driver,
      driverName: "native",
      store,
      secrets: staticSecrets(options.secrets ?? {}),
      observer,
      limits: { memoryMb: 64, timeoutMs: 30_000 },
    },
    options.signal ?? new AbortController().signal,
  )
  return { result, observer }
}

const sh = (name: string, script: string, extra = "") =>
  `runtime.run({ name: "${name}", image: "busybox", command: { path: "sh", args: ["-c", ${JSON.stringify(script)}] }${extra} })`

describe("the engine", () => {
  it("records tasks in start order with paths, statuses and codes, and reports them as they go", async () => {
    const { result, observer } = await run(`export const pipeline = async () => {
      await ${sh("first", "echo one")}
      await Promise.all([${sh("left", "exit 0")}, ${sh("right", "exit 4")}])
      console.log("done")
    }`)
    expect(result.status).toBe("success")
    expect(result.code).toBe(0)
    expect(result.tasks.map((task) => [task.path, task.status, task.code])).toEqual([
      ["tasks/1/first", "success", 0],
      ["tasks/2/left", "success", 0],
      ["tasks/3/right", "failure", 4],
      ["pipeline/console", "success", 0],
    ])
    expect(store.tasks(result.runId).map((task) => task.path)).toEqual(result.tasks.map((task) => task.path))
    expect(observer.events.slice(0, 2)).toEqual(["started tasks/1/first", "finished tasks/1/first success 0"])
    expect(observer.result).toEqual(result)
    expect(store.output(result.runId, "tasks/1/first", "stdout")).toBe("one\n")
    expect(store.output(result.runId, "pipeline/console", "stdout")).toBe("done\n")
  })

  it("redacts secrets in stored output, live output, task results and the error message, longest first", async () => {
    const { result, observer } = await run(
      `export const pipeline = async () => {
        const r = await ${sh("leak", 'echo "token=$TOKEN short=$SHORT"; echo "$TOKEN" >&2', ', env: { TOKEN: "secret:TOKEN", SHORT: "secret:SHORT" }')}
        console.log("result:", r.stdout.trim(), "|", r.stderr.trim())
        throw new Error("failed with hunter2-long-value inside")
      }`,
      { secrets: { TOKEN: "hunter2-long-value", SHORT: "hunter2" } },
    )
    const stored = store.output(result.runId, "tasks/1/leak", "stdout")
    expect(stored).toBe("token=***REDACTED*** short=***REDACTED***\n")
    expect(store.output(result.runId, "tasks/1/leak", "stderr")).toBe("***REDACTED***\n")
    expect(observer.live["tasks/1/leak stdout"]).toBe(stored)
    expect(store.output(result.runId, "pipeline/console", "stdout")).toBe(
      "result: token=***REDACTED*** short=***REDACTED*** | ***REDACTED***\n",
    )
    expect(result.status).toBe("failure")
    expect(result.message).toBe("failed with ***REDACTED*** inside (at pipeline.ts:4:15)")
    expect(store.output(result.runId, "pipeline/console", "stderr")).toBe(
      "Error: failed with ***REDACTED*** inside (at pipeline.ts:4:15)\n",
    )
  })

  it("keeps a task's output out of memory: the result holds the tail, the store holds it all", async () => {
    const { result } = await run(`export const pipeline = async () => {
      const r = await ${sh("big", "yes 0123456789abcdef | head -c 6000000; echo END")}
      console.log(r.stdout.length, r.stdout.slice(0, 8), r.stdout.endsWith("END\\n"))
    }`)
    expect(result.status).toBe("success")
    const printed = store.output(result.runId, "pipeline/console", "stdout")
    const [length, start, end] = printed.trim().split(" ")
    expect(Number(length)).toBeLessThan(4.5 * 1024 * 1024)
    expect(start).toBe("[runnel:")
    expect(end).toBe("true")
    expect(store.output(result.runId, "tasks/1/big", "stdout").length).toBe(6_000_004)
  })

  it("keeps memory bounded while a task prints 512 MB", async () => {
    const flood = (bytes: number) => `export const pipeline = async () => {
      const r = await ${sh("flood", `yes 'a line of build output, eighty characters long, like most CI logs are....' | head -c ${bytes}`)}
      assert.equal(r.code, 0)
    }`
    // A first, smaller flood brings the process to its working size (the store's writer thread, V8's
    // young generation at full speed); what follows must not grow with the size of the output.
    await run(flood(32_000_000))
    let peak = 0
    const before = process.memoryUsage().rss
    const sampler = setInterval(() => {
      peak = Math.max(peak, process.memoryUsage().rss - before)
    }, 20)
    const { result } = await run(flood(512_000_000))
    clearInterval(sampler)
    expect(result.status).toBe("success")
    // About 64 MB, as the issue says: 26-28 MiB measured alone, up to 65 MiB while the rest of the
    // suite loads both cores (the writer thread and the collector fall behind); a leak of the
    // output itself would be hundreds of MiB.
    expect(peak / 2 ** 20).toBeLessThan(80)
  }, 120_000)

  it("stops the run and kills its tasks when aborted", async () => {
    const controller = new AbortController()
    setTimeout(() => controller.abort(), 300)
    const started = Date.now()
    const { result } = await run(`export const pipeline = async () => { await ${sh("long", "sleep 30")} }`, {
      signal: controller.signal,
    })
    expect(Date.now() - started).toBeLessThan(5000)
    expect(result.status).toBe("aborted")
    expect(result.code).toBe(130)
    expect(result.tasks.map((task) => task.status)).toEqual(["aborted"])
  })

  it("ends tasks the script did not wait for when the script ends", async () => {
    const { result } = await run(`export const pipeline = async () => { void ${sh("forgotten", "sleep 30")} }`)
    expect(result.status).toBe("success")
    expect(result.tasks.map((task) => [task.path, task.status])).toEqual([["tasks/1/forgotten", "aborted"]])
  })

  it("is an error, not a failure, when the driver cannot start a task, even if the script catches it", async () => {
    const { result } = await run(`export const pipeline = async () => {
      try { await runtime.run({ name: "ghost", image: "busybox", command: { path: "no-such-program-here" } }) } catch {}
    }`)
    expect(result.status).toBe("error")
    expect(result.code).toBe(2)
    expect(result.message).toContain("no-such-program-here")
    expect(result.tasks.map((task) => task.status)).toEqual(["error"])
  })

  it("fails a task that runs past its timeout without throwing", async () => {
    const { result } = await run(`export const pipeline = async () => {
      const r = await ${sh("slow", "sleep 10", ', timeout: "300ms"')}
      console.log(r.timedOut, r.code !== 0)
    }`)
    expect(result.status).toBe("success")
    expect(result.tasks[0]?.status).toBe("failure")
    expect(store.output(result.runId, "pipeline/console", "stdout")).toBe("true true\n")
  })

  it("resumes a run from its journal: finished tasks return their results, the first unfinished one runs", async () => {
    const counter = join(dir, "side-effects.txt")
    writeFileSync(counter, "")
    const source = `export const pipeline = async () => {
      const first = await ${sh("first", `echo first >> ${counter}; echo out-1`)}
      await ${sh("second", `echo second >> ${counter}; exit 3`)}
      await ${sh("third", `echo third >> ${counter}; sleep $PAUSE`, ', env: { PAUSE: "0" }')}
      console.log("first said", first.stdout.trim())
    }`
    const controller = new AbortController()
    const interrupted = run(source.replace('PAUSE: "0"', 'PAUSE: "30"'), {
      runId: "resumed-run",
      signal: controller.signal,
    })
    const waitForThird = async () => {
      for (let i = 0; i < 200 && !readFileSync(counter, "utf8").includes("third"); i++) await sleep(25)
    }
    await sleep(100)
    await waitForThird()
    controller.abort()
    expect((await interrupted).result.status).toBe("aborted")

    const journal = journalFromStore(store, "resumed-run")
    expect([...journal.keys()]).toEqual(["tasks/1/first", "tasks/2/second"])
    const { result } = await run(source, { runId: "resumed-run", journal })
    expect(result.status).toBe("success")
    expect(readFileSync(counter, "utf8")).toBe("first\nsecond\nthird\nthird\n")
    expect(result.tasks.map((task) => [task.path, task.status, task.code])).toEqual([
      ["tasks/1/first", "success", 0],
      ["tasks/2/second", "failure", 3],
      ["tasks/3/third", "success", 0],
      ["pipeline/console", "success", 0],
    ])
    expect(store.output("resumed-run", "pipeline/console", "stdout")).toBe("first said out-1\n")
  })

  it("removes the run's directories and volumes at the end", async () => {
    await run(`export const pipeline = async () => {
      const v = volumes.create({ name: "data" })
      await ${sh("write", "echo x > f", ', mounts: { "/data": v }, workDir: "/data"')}
    }`)
    expect(readdirSync(workRoot)).toEqual([])
  })
})
