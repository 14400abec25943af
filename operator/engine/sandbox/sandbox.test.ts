import { describe, expect, it } from "vitest"
import { SystemError } from "../../../lib/core/errors.ts"
import { compileScript } from "../../../lib/script/compile.ts"
import { runInSandbox, ScriptFailure, type ScriptHost } from "./sandbox.ts"

const limits = { memoryMb: 64, timeoutMs: 5000 }

/** Runs a script with a host that records console output and answers tasks with their name. */
async function run(
  source: string,
  options: { timeoutMs?: number; memoryMb?: number; signal?: AbortSignal; gateMs?: number } = {},
) {
  const printed: string[] = []
  const host: ScriptHost = {
    runTask: async (json) => ({ code: 0, stdout: `ran ${JSON.parse(json).name}`, stderr: "" }),
    console: (stream, text) => printed.push(`${stream}: ${text}`),
    respond: () => true,
    webhookTrigger: () => true,
    gate: async (json) => {
      await new Promise((resolve) => setTimeout(resolve, options.gateMs ?? 0))
      return { approvedBy: "anonymous", request: JSON.parse(json) }
    },
    // Echoes the request as the response body, so a test sees what crossed the boundary.
    fetch: async (json, body) => ({
      status: 201,
      statusText: "Created",
      url: JSON.parse(json).url,
      headers: [
        ["content-type", "application/json"],
        ["set-cookie", "a=1"],
        ["set-cookie", "b=2"],
      ],
      body: Buffer.from(JSON.stringify({ request: JSON.parse(json), bytes: body?.byteLength ?? null })),
    }),
    decodeUtf8: (body) => new TextDecoder().decode(body),
    notifyConfigs: (json) => {
      if (JSON.parse(json) === null) throw new TypeError("notify.setConfigs: expected an object")
    },
    notifySend: async () => {},
    resource: async (json) => JSON.parse(json),
  }
  const script = await compileScript(source, "pipeline.ts")
  const settled = await runInSandbox(
    script,
    { pipelineContext: { runID: "r1", args: ["a", "b"] }, request: undefined },
    host,
    { ...limits, ...options },
    options.signal ?? new AbortController().signal,
  ).then(
    () => undefined,
    (error: unknown) => error as Error,
  )
  return { error: settled, printed: printed.join("") }
}

describe("the script sandbox", () => {
  it("gives each run an isolate of its own: what one run leaves in its globals, the next never sees", async () => {
    const leave = "export const pipeline = async () => { (globalThis as any).left = 'by the first run' }"
    const look = "export const pipeline = async () => { console.log(typeof (globalThis as any).left) }"
    expect((await run(leave)).error).toBeUndefined()
    for (let n = 0; n < 3; n++) expect((await run(look)).printed).toBe("stdout: undefined\n")
  })

  it("keeps each run's memory limit when runs with other limits come between", async () => {
    const bomb = "export const pipeline = async () => { const a: string[] = []; for (;;) a.push('x'.repeat(1 << 20)) }"
    expect((await run("export const pipeline = async () => {}", { memoryMb: 256 })).error).toBeUndefined()
    const { error } = await run(bomb, { memoryMb: 16 })
    expect(error?.message).toContain("--pipeline-memory-mb 16")
  })

  it.each([
    ["export const pipeline", "export const pipeline = async () => { console.log('ran') }"],
    ["export { pipeline }", "async function pipeline() { console.log('ran') }\nexport { pipeline }"],
    ["export default", "export default async function () { console.log('ran') }"],
  ])("runs a script written with %s", async (_, source) => {
    const { error, printed } = await run(source)
    expect(error).toBeUndefined()
    expect(printed).toBe("stdout: ran\n")
  })

  it.each([
    [
      "export const pipeline",
      "export const pipeline = async () => { console.log(JSON.stringify(await pipeline.gate({ name: 'go' }))) }",
    ],
    [
      "export { pipeline }",
      "async function pipeline() { console.log(JSON.stringify(await pipeline.gate({ name: 'go' }))) }\nexport { pipeline }",
    ],
    [
      "export default",
      "export default async function () { console.log(JSON.stringify(await pipeline.gate({ name: 'go' }))) }",
    ],
  ])("gives pipeline.gate() to a script written with %s", async (_, source) => {
    const { error, printed } = await run(source)
    expect(error).toBeUndefined()
    expect(printed).toBe('stdout: {"approvedBy":"anonymous","request":{"name":"go"}}\n')
  })

  it("checks pipeline.gate()'s argument where the script can catch it, naming the field", async () => {
    const { error, printed } = await run(`
      export const pipeline = async () => {
        for (const options of [{}, { name: "d", timeout: -1 }, { name: "d", timeout: "soon" }, { name: "d", message: 5 }]) {
          try { await pipeline.gate(options) } catch (e) { console.log(e.message) }
        }
        console.log(JSON.stringify(await pipeline.gate({ name: "d", timeout: "1m30s", message: "ok?" })))
      }`)
    expect(error).toBeUndefined()
    expect(printed.split("\n")).toEqual([
      "stdout: pipeline.gate: name must be a non-empty string of at most 253 characters, got undefined",
      'stdout: pipeline.gate: timeout must be a positive number of seconds or a duration such as "30m", got -1',
      'stdout: pipeline.gate: timeout must be a duration such as "30s", "1h" or "1m30s", or a number of seconds, got "soon"',
      "stdout: pipeline.gate: message must be a string, got 5",
      'stdout: {"approvedBy":"anonymous","request":{"name":"d","message":"ok?","timeoutMs":90000}}',
      "",
    ])
  })

  it("does not count the time a script waits on a gate against its time limit", async () => {
    const { error, printed } = await run(
      "export const pipeline = async () => { await pipeline.gate({ name: 'slow' }); console.log('after') }",
      { timeoutMs: 300, gateMs: 900 },
    )
    expect(error).toBeUndefined()
    expect(printed).toBe("stdout: after\n")
  })

  it("gives the script its context, console streams and task results", async () => {
    const { error, printed } = await run(`
      export const pipeline = async () => {
        console.log(pipelineContext.runID, pipelineContext.args)
        console.error("to stderr", { n: 1 })
        const result = await runtime.run({ name: "t" })
        console.info(result.stdout)
      }`)
    expect(error).toBeUndefined()
    expect(printed).toBe('stdout: r1 ["a","b"]\nstderr: to stderr {"n":1}\nstdout: ran t\n')
  })

  it("has no process, require, Node modules or way to the host's realm", async () => {
    const { error, printed } = await run(`
      export const pipeline = async () => {
        console.log(typeof process, typeof require === "function", typeof fetch, typeof setTimeout)
        console.log(globalThis.constructor.constructor("return typeof process")())
        console.log(Object.getOwnPropertyNames(globalThis).filter((name) => name.startsWith("__runnel")).join(",") || "none")
        try { require("node:fs") } catch (e) { console.log(e.message) }
        try { await import("node:child_process") } catch (e) { console.log(e.message) }
      }`)
    expect(error).toBeUndefined()
    expect(printed.split("\n")).toEqual([
      "stdout: undefined true function undefined",
      "stdout: undefined",
      "stdout: __runnelMain",
      'stdout: cannot import "node:fs": pipelines run in a sandbox without Node modules; run tools in a task with runtime.run()',
      'stdout: cannot import "node:child_process": pipelines run in a sandbox without Node modules; run tools in a task with runtime.run()',
      "",
    ])
  })

  it("passes fetch, notify and nativeResources calls to the host as data, volumes by name", async () => {
    const { error, printed } = await run(`
      export const pipeline = async () => {
        const response = await fetch("https://example.com/x", { method: "post", headers: { "X-A": " 1 " }, body: new Uint8Array([1, 2, 3]), timeout: 2 })
        console.log(response.status, response.ok, response.statusText, response.headers.get("set-cookie"), JSON.stringify(response.headers.getSetCookie()))
        console.log(JSON.stringify(await response.json()))
        const work = volumes.create({ name: "work" })
        console.log(JSON.stringify(await nativeResources.fetch({ type: "git", destDir: { volume: work, path: "./src/" } })))
        console.log(JSON.stringify(await nativeResources.push({ type: "git", params: { repository: work, tag: "v1" } })))
        try { notify.setConfigs() } catch (e) { console.log(e.name, e.message) }
      }`)
    expect(error).toBeUndefined()
    expect(printed.split("\n")).toEqual([
      'stdout: 201 true Created a=1, b=2 ["a=1","b=2"]',
      `stdout: ${JSON.stringify({ request: { url: "https://example.com/x", method: "POST", headers: [["x-a", "1"]], timeoutMs: 2000 }, bytes: 3 })}`,
      `stdout: ${JSON.stringify({ operation: "fetch", type: "git", destDir: { volume: "work", path: "src" } })}`,
      `stdout: ${JSON.stringify({ operation: "push", type: "git", params: { tag: "v1" }, repository: { volume: "work", path: "" } })}`,
      "stdout: TypeError notify.setConfigs: expected an object",
      "",
    ])
  })

  it("refuses a static import of a Node module with the line of the import", async () => {
    const { error } = await run(
      'import { readFileSync } from "node:fs"\nexport const pipeline = async () => { readFileSync("/etc/passwd") }',
    )
    expect(error).toBeInstanceOf(ScriptFailure)
    expect(error?.message).toBe(
      'cannot import "node:fs": pipelines run in a sandbox without Node modules; run tools in a task with runtime.run() (at pipeline.ts:1:30)',
    )
  })

  it("reports a thrown error with the line and column of the user's TypeScript", async () => {
    const { error } = await run(
      "type Version = { tag?: string }\n\nexport const pipeline = async () => {\n  const v: Version = {}\n  if (!v.tag) throw new Error('not tagged')\n}\n",
    )
    expect(error).toBeInstanceOf(ScriptFailure)
    expect(error?.message).toBe("not tagged (at pipeline.ts:5:21)")
  })

  it("reports a thrown non-Error value", async () => {
    const { error } = await run("export const pipeline = async () => { throw 'plain string' }")
    expect(error).toBeInstanceOf(ScriptFailure)
    expect(error?.message).toBe("a non-Error value was thrown: plain string")
  })

  it("refuses a script without a pipeline export as a system error", async () => {
    const { error } = await run("export const build = async () => {}")
    expect(error).toBeInstanceOf(SystemError)
    expect(error?.message).toContain("pipeline.ts does not export a pipeline function")
  })

  it("rejects a syntax error at compile time with line and column", async () => {
    await expect(compileScript("export const pipeline = async () => {\n  const x = ;\n}", "broken.ts")).rejects.toThrow(
      /^broken\.ts:2:13: Unexpected ";"\n {4} {2}const x = ;\n {4} {12}\^$/,
    )
  })

  it("ends a runaway loop at the time limit and names the limit", async () => {
    const { error } = await run("export const pipeline = async () => { while (true) {} }", { timeoutMs: 300 })
    expect(error).toBeInstanceOf(SystemError)
    expect(error?.message).toBe(
      "the pipeline ran longer than its time limit (--pipeline-timeout 300ms) and was stopped",
    )
  })

  it("ends a memory bomb at the memory limit and names the limit", async () => {
    const { error } = await run(
      "export const pipeline = async () => { const hog = []; while (true) hog.push(new Array(1e5).fill(hog.length)) }",
      { memoryMb: 32 },
    )
    expect(error).toBeInstanceOf(SystemError)
    expect(error?.message).toBe(
      "the pipeline used more memory than its limit (--pipeline-memory-mb 32) and was stopped",
    )
  })

  it("keeps serving other scripts after one was stopped", async () => {
    const bomb = run(
      "export const pipeline = async () => { const s = []; for (;;) s.push('x'.repeat(1e6) + s.length) }",
      {
        memoryMb: 16,
      },
    )
    const fine = run("export const pipeline = async () => { console.log('still here') }")
    expect((await bomb).error).toBeInstanceOf(SystemError)
    expect((await fine).printed).toBe("stdout: still here\n")
    expect((await run("export default async () => console.log('after')")).printed).toBe("stdout: after\n")
  })

  it("stops when the run is aborted, with the abort's reason", async () => {
    const controller = new AbortController()
    setTimeout(() => controller.abort(new Error("stopped by the user")), 100)
    const { error } = await run("export const pipeline = async () => { for (;;) {} }", { signal: controller.signal })
    expect(error?.message).toBe("stopped by the user")
  })

  it("throws assertion errors that show both values", async () => {
    const { error } = await run(`export const pipeline = async () => {
      assert.truthy(1); assert.notEqual(1, 2); assert.containsString("hello world", "world")
      assert.equal("v1.2", "v1.3", "version from the build")
    }`)
    expect(error?.message).toBe(
      'assert.equal failed: expected "v1.3", got "v1.2": version from the build (at pipeline.ts:3:14)',
    )
  })

  it.each([
    ["notEqual", "assert.notEqual(2, 2)", "assert.notEqual failed: expected a value other than 2"],
    [
      "containsString",
      'assert.containsString("abc", "z")',
      'assert.containsString failed: expected "abc" to contain "z"',
    ],
    [
      "truthy",
      'assert.truthy("", "needs a tag")',
      'assert.truthy failed: expected a truthy value, got "": needs a tag',
    ],
  ])("assert.%s says what it expected", async (_, call, message) => {
    const { error } = await run(`export const pipeline = async () => { ${call} }`)
    expect(error?.message).toBe(`${message} (at pipeline.ts:1:46)`)
  })

  it("answers http.request() with undefined and ignores http.respond() outside webhooks", async () => {
    const { error, printed } = await run(
      "export const pipeline = async () => { http.respond({ status: 201 }); console.log(String(http.request())) }",
    )
    expect(error).toBeUndefined()
    expect(printed).toBe("stdout: undefined\n")
  })
})
