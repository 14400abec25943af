import { mkdtempSync, readdirSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { OutputStream, RunResult, TaskRecord } from "../../lib/core/run.ts"
import type { LogStore } from "../../lib/logs/log-store.ts"
import { openSqliteLogStore } from "../../lib/logs/sqlite-log-store.ts"
import { staticSecrets } from "../../lib/secrets/secret-resolver.ts"
import { nativeDriverFactory } from "../drivers/native/native-driver.ts"
import { runScript } from "./engine.ts"
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
  result: RunResult | undefined
  taskStarted(task: TaskRecord) {
    this.events.push(`started ${task.path}`)
  }
  output(path: string, stream: OutputStream, text: string) {
    this.live[`${path} ${stream}`] = (this.live[`${path} ${stream}`] ?? "") + text
  }
  taskFinished(task: TaskRecord) {
    this.events.push(`finished ${task.path} ${task.status} ${task.code}`)
  }
  runFinished(result: RunResult) {
    this.result = result
  }
}

let runs = 0
async function run(source: string, options: { secrets?: Record<string, string>; signal?: AbortSignal } = {}) {
  const observer = new Recorder()
  const result = await runScript(
    {
      runId: `engine-test-${++runs}`,
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

  it("removes the run's directories and volumes at the end", async () => {
    await run(`export const pipeline = async () => {
      const v = volumes.create({ name: "data" })
      await ${sh("write", "echo x > f", ', mounts: { "/data": v }, workDir: "/data"')}
    }`)
    expect(readdirSync(workRoot)).toEqual([])
  })
})
