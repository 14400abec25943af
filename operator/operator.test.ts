import { createHash } from "node:crypto"
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { ApiException, CustomObjectsApi, PatchStrategy, setHeaderOptions, Watch } from "@kubernetes/client-node"
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { type RunningApi, startEmbeddedApi } from "../kubeserver/embedded-api.fixture.ts"
import { loadCrds } from "../kubeserver/resource-types.ts"
import type { PipelineObject, RunObject } from "../lib/kube/resources.ts"
import type { LogStore } from "../lib/logs/log-store.ts"
import { openSqliteLogStore } from "../lib/logs/sqlite-log-store.ts"
import { runSecrets } from "../lib/secrets/secret-store.ts"
import { openSqliteSecretStore } from "../lib/secrets/sqlite-secret-store.ts"
import { openingAfter } from "./drivers/driver.ts"
import { nativeDriverFactory } from "./drivers/native/native-driver.ts"
import { type Operator, startOperator } from "./operator.ts"

// The operator with real parts: the embedded API over loopback HTTP with runnel's CRDs, client-node v2,
// a SQLite log store on a temp file and the native driver.
const crds = loadCrds(resolve(import.meta.dirname, "../crds"))
const merge = setHeaderOptions("Content-Type", PatchStrategy.MergePatch)
const group = { group: "runnel.dev", version: "v1alpha1", namespace: "default" }
const pipelines = { ...group, plural: "pipelines" }
const runs = { ...group, plural: "runs" }

let api: RunningApi
let objects: CustomObjectsApi
let dir: string
let store: LogStore
let operator: Operator | undefined

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "runnel-operator-test-"))
  store = await openSqliteLogStore(join(dir, "logs.db"))
})
afterAll(async () => {
  await store.close()
  rmSync(dir, { recursive: true, force: true })
})
beforeEach(async () => {
  api = await startEmbeddedApi({ crds })
  objects = api.kubeConfig.makeApiClient(CustomObjectsApi)
})
afterEach(async () => {
  await operator?.stop(0)
  operator = undefined
  await api.close()
})

const native = nativeDriverFactory({ workRoot: join(tmpdir(), "runnel-operator-test-work"), path: "/usr/bin:/bin" })

/** `opening` is called with the run's id each time the driver opens a run, before it does. */
async function start(options: { maxInFlight?: number; opening?: (runId: string) => Promise<void> } = {}) {
  operator = await startOperator({
    kubeConfig: api.kubeConfig,
    namespace: "default",
    store,
    secrets: runSecrets(await openSqliteSecretStore({ path: ":memory:" }), true),
    drivers: (name, config) => {
      if (name !== "native") throw new Error(`this test has only the native driver, not "${name}"`)
      const driver = native.create(config)
      return options.opening === undefined ? driver : openingAfter(driver, options.opening)
    },
    defaultDriver: "native",
    allowedDrivers: "*",
    maxInFlight: options.maxInFlight ?? 10,
    limits: { memoryMb: 64, timeoutMs: 60_000 },
    statusThrottleMs: 50,
  })
  return operator
}

const task = (name: string, script: string) =>
  `await runtime.run({ name: ${JSON.stringify(name)}, image: "busybox", command: { path: "sh", args: ["-c", ${JSON.stringify(script)}] } })`

const script = (...lines: string[]) => `export const pipeline = async () => {\n  ${lines.join("\n  ")}\n}\n`

function createPipeline(name: string, content: string, spec: Record<string, unknown> = {}): Promise<PipelineObject> {
  return objects.createNamespacedCustomObject({
    ...pipelines,
    body: { apiVersion: "runnel.dev/v1alpha1", kind: "Pipeline", metadata: { name }, spec: { content, ...spec } },
  })
}

function createRun(name: string, pipeline: string, spec: Record<string, unknown> = {}): Promise<RunObject> {
  return objects.createNamespacedCustomObject({
    ...runs,
    body: {
      apiVersion: "runnel.dev/v1alpha1",
      kind: "Run",
      metadata: { name },
      spec: { pipelineRef: { name: pipeline }, ...spec },
    },
  })
}

const getRun = (name: string): Promise<RunObject> => objects.getNamespacedCustomObject({ ...runs, name })
const getPipeline = (name: string): Promise<PipelineObject> => objects.getNamespacedCustomObject({ ...pipelines, name })

async function eventually<T>(read: () => Promise<T>, holds: (value: T) => boolean, what: string): Promise<T> {
  const deadline = Date.now() + 20_000
  for (;;) {
    const value = await read()
    if (holds(value)) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}; last: ${JSON.stringify(value)}`)
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
}

const finished = (name: string) =>
  eventually(
    () => getRun(name),
    (run) => ["success", "failure", "error", "aborted"].includes(run.status?.phase ?? ""),
    `run ${name} finishes`,
  )

const gone = async (read: Promise<unknown>) =>
  read.then(
    () => false,
    (error: unknown) => error instanceof ApiException && error.code === 404,
  )

describe("the pipeline reconciler", () => {
  it("marks a pipeline whose script compiles Ready with its generation observed", async () => {
    await start()
    await createPipeline("good", script(task("a", "true")))
    const pipeline = await eventually(
      () => getPipeline("good"),
      (p) => p.status?.observedGeneration === 1,
      "the status is written",
    )
    expect(pipeline.status?.conditions).toEqual([
      expect.objectContaining({ type: "Ready", status: "True", reason: "Compiled", observedGeneration: 1 }),
    ])
  })

  it("shows why a script is not ready: Ready=False with the compiler's message and line", async () => {
    await start()
    await createPipeline("broken", "export const pipeline = async () => {\n  const x = ;\n}\n")
    const pipeline = await eventually(
      () => getPipeline("broken"),
      (p) => p.status?.observedGeneration === 1,
      "the status is written",
    )
    const ready = pipeline.status?.conditions?.find((condition) => condition.type === "Ready")
    expect(ready).toMatchObject({ status: "False", reason: "InvalidContent" })
    expect(ready?.message).toMatch(/^broken\.ts:2:13: Unexpected ";"/)
  })

  it("shows an rbacExpression applied with kubectl that does not compile: Ready=False with its position", async () => {
    await start()
    await createPipeline("guarded", script(task("a", "true")), { rbacExpression: '"release" in Group' })
    const pipeline = await eventually(
      () => getPipeline("guarded"),
      (p) => p.status?.observedGeneration === 1,
      "the status is written",
    )
    expect(pipeline.status?.conditions?.[0]).toMatchObject({ status: "False", reason: "InvalidRbacExpression" })
    expect(pipeline.status?.conditions?.[0]?.message).toMatch(/^rbacExpression: invalid expression at 1:\d+: .*Group/)
  })

  it("refuses a script that exports no pipeline function", async () => {
    await start()
    await createPipeline("no-export", "export const build = async () => {}\n")
    const pipeline = await eventually(
      () => getPipeline("no-export"),
      (p) => p.status?.observedGeneration === 1,
      "the status is written",
    )
    expect(pipeline.status?.conditions?.[0]).toMatchObject({ status: "False", reason: "InvalidContent" })
    expect(pipeline.status?.conditions?.[0]?.message).toContain("no-export.ts does not export a pipeline function")
  })

  it("checks a new generation again and keeps the transition time while Ready stays the same", async () => {
    await start()
    await createPipeline("moving", script())
    const first = await eventually(
      () => getPipeline("moving"),
      (p) => p.status?.observedGeneration === 1,
      "generation 1 is observed",
    )
    await objects.patchNamespacedCustomObject(
      { ...pipelines, name: "moving", body: { spec: { content: script(task("a", "true")) } } },
      merge,
    )
    const second = await eventually(
      () => getPipeline("moving"),
      (p) => p.status?.observedGeneration === 2,
      "generation 2 is observed",
    )
    expect(second.status?.conditions?.[0]).toMatchObject({ status: "True", observedGeneration: 2 })
    expect(second.status?.conditions?.[0]?.lastTransitionTime).toBe(first.status?.conditions?.[0]?.lastTransitionTime)
  })

  it("validates YAML: Ready=True when valid, Ready=False with the path and line of each problem", async () => {
    await start()
    await createPipeline(
      "yaml",
      'jobs:\n  - name: build\n    plan:\n      - task: unit\n        config:\n          platform: linux\n          run: { path: "true" }\n',
    )
    await createPipeline("bad-yaml", "jobs:\n  - name: build\n    plan:\n      - task: unit\n        confg: {}\n")
    const written = (name: string) =>
      eventually(
        () => getPipeline(name),
        (p) => p.status?.observedGeneration === 1,
        "the status is written",
      )
    expect((await written("yaml")).status?.conditions?.[0]).toMatchObject({ status: "True", reason: "Validated" })
    const bad = (await written("bad-yaml")).status?.conditions?.[0]
    expect(bad).toMatchObject({ status: "False", reason: "InvalidContent" })
    expect(bad?.message).toMatch(/jobs\[0\]\.plan\[0\]/)
    expect(bad?.message).toMatch(/did you mean "config"/)
    expect(bad?.message).toMatch(/line 5/)
  })
})

describe("schedules of YAML pipelines", () => {
  const job = (name: string, trigger: string) =>
    `  - name: ${name}\n    ${trigger}\n    plan:\n      - task: t\n        config:\n          platform: linux\n          run: { path: "true" }\n`
  const schedulesOf = async (pipeline: string) =>
    (
      (await objects.listNamespacedCustomObject({
        ...pipelines,
        plural: "schedules",
        labelSelector: `runnel.dev/pipeline=${pipeline}`,
      })) as {
        items: { metadata: { name: string; ownerReferences?: { uid: string }[] }; spec: Record<string, unknown> }[]
      }
    ).items.sort((a, b) => a.metadata.name.localeCompare(b.metadata.name))

  it("derives one Schedule per job with triggers.schedule, owned by the Pipeline, and keeps them in step", async () => {
    await start()
    const created = await createPipeline(
      "timed",
      `jobs:\n${job("nightly", 'triggers: { schedule: { cron: "0 3 * * *" } }')}${job("Poll_Often", "triggers: { schedule: { every: 90s } }")}${job("manual", "serial: false")}`,
    )
    const first = await eventually(
      () => schedulesOf("timed"),
      (list) => list.length === 2,
      "two schedules",
    )
    expect(first.map((s) => [s.metadata.name, s.spec])).toEqual([
      [
        "timed-nightly",
        { pipelineRef: { name: "timed" }, jobName: "nightly", type: "cron", expression: "0 3 * * *", enabled: true },
      ],
      [
        expect.stringMatching(/^timed-poll-often-[0-9a-f]{8}$/),
        { pipelineRef: { name: "timed" }, jobName: "Poll_Often", type: "interval", expression: "90s", enabled: true },
      ],
    ])
    for (const schedule of first) expect(schedule.metadata.ownerReferences?.[0]?.uid).toBe(created.metadata?.uid)

    // A person disables one; a new expression keeps that, and a job that loses its trigger loses its Schedule.
    await objects.patchNamespacedCustomObject(
      { ...pipelines, plural: "schedules", name: "timed-nightly", body: { spec: { enabled: false } } },
      setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
    )
    const current = await getPipeline("timed")
    await objects.replaceNamespacedCustomObject({
      ...pipelines,
      name: "timed",
      body: {
        ...current,
        spec: { content: `jobs:\n${job("nightly", 'triggers: { schedule: { cron: "30 4 * * *" } }')}` },
      },
    })
    const second = await eventually(
      () => schedulesOf("timed"),
      (list) => list.length === 1 && list[0]?.spec.expression === "30 4 * * *",
      "the schedules follow the new content",
    )
    expect(second[0]?.spec).toMatchObject({ jobName: "nightly", type: "cron", enabled: false })
  })
})

describe("the run reconciler", () => {
  it("runs a Run to success, mirrors its tasks into the status and owns it by its pipeline", async () => {
    await start()
    const pipeline = await createPipeline("hello", script(task("greet", "echo hello"), task("check", "exit 3")))
    await createRun("hello-1", "hello", { trigger: { type: "manual", args: ["x"] } })
    const run = await finished("hello-1")
    expect(run.status).toMatchObject({ phase: "success", code: 0, message: "" })
    expect(run.status?.tasks?.map((t) => [t.path, t.status, t.code])).toEqual([
      ["tasks/1/greet", "success", 0],
      ["tasks/2/check", "failure", 3],
    ])
    expect(run.status?.duration).toMatch(/^\d+(\.\d+)?m?s$/)
    expect(Date.parse(run.status?.finishedAt ?? "")).toBeGreaterThanOrEqual(Date.parse(run.status?.startedAt ?? ""))
    expect(run.metadata?.ownerReferences).toEqual([
      expect.objectContaining({ kind: "Pipeline", name: "hello", uid: pipeline.metadata?.uid, controller: true }),
    ])
    expect(store.output("hello-1", "tasks/1/greet", "stdout")).toBe("hello\n")
  })

  it("says running before the run's first task starts, so that a restart resumes rather than repeats it", async () => {
    const phases: (string | undefined)[] = []
    await start({ opening: async (runId) => void phases.push((await getRun(runId)).status?.phase) })
    await createPipeline("first-task", script(task("one", "true"), task("two", "true")))
    await createRun("first-task-1", "first-task")
    expect((await finished("first-task-1")).status?.phase).toBe("success")
    expect(phases).toEqual(["running"])
  })

  it("ends a failing script as failure with its message", async () => {
    await start()
    await createPipeline("throws", script('throw new Error("the tests are red")'))
    await createRun("throws-1", "throws")
    const run = await finished("throws-1")
    expect(run.status).toMatchObject({ phase: "failure", code: 1 })
    expect(run.status?.message).toContain("the tests are red")
  })

  it("ends a Run of a missing pipeline as error naming it", async () => {
    await start()
    await createRun("orphan-1", "no-such-pipeline")
    const run = await finished("orphan-1")
    expect(run.status).toMatchObject({ phase: "error", code: 2 })
    expect(run.status?.message).toContain('pipeline "no-such-pipeline" not found in namespace "default"')
  })

  it("ends a Run of a pipeline that does not compile as error with the compiler's line", async () => {
    await start()
    await createPipeline("bad", "export const pipeline = async () => {\n  const x = ;\n}\n")
    await createRun("bad-1", "bad")
    const run = await finished("bad-1")
    expect(run.status).toMatchObject({ phase: "error", code: 2 })
    expect(run.status?.message).toContain("bad.ts:2:13")
  })

  it("ends a Run of a pipeline whose driver is unknown as error naming the known ones", async () => {
    await start()
    await createPipeline("podman", script(task("a", "true")), { driver: "podman" })
    await createRun("podman-1", "podman")
    const run = await finished("podman-1")
    expect(run.status).toMatchObject({ phase: "error" })
    expect(run.status?.message).toContain('"podman"')
  })

  it("runs at most max-in-flight Runs at once, first in first out, and queues the rest", async () => {
    await start({ maxInFlight: 2 })
    await createPipeline("slow", script(task("wait", "sleep 0.4")))
    const phases = new Map<string, string>()
    let mostRunning = 0
    const watching = await new Watch(api.kubeConfig).watch(
      "/apis/runnel.dev/v1alpha1/namespaces/default/runs",
      {},
      (_type, run: RunObject) => {
        phases.set(run.metadata?.name ?? "", run.status?.phase ?? "")
        mostRunning = Math.max(mostRunning, [...phases.values()].filter((phase) => phase === "running").length)
      },
      () => {},
    )
    try {
      const names = ["q-1", "q-2", "q-3", "q-4", "q-5"]
      for (const name of names) await createRun(name, "slow")
      await eventually(
        () => getRun("q-5"),
        (run) => run.status?.phase === "queued" || run.status?.phase === "running",
        "the last run is queued",
      )
      const done = await Promise.all(names.map(finished))
      expect(done.map((run) => run.status?.phase)).toEqual(["success", "success", "success", "success", "success"])
      expect(mostRunning).toBe(2)
      const byStart = [...done].sort(
        (a, b) => Date.parse(a.status?.startedAt ?? "") - Date.parse(b.status?.startedAt ?? ""),
      )
      expect(byStart.map((run) => run.metadata?.name)).toEqual(names)
      expect(Date.parse(done[2]?.status?.startedAt ?? "")).toBeGreaterThanOrEqual(
        Math.min(...done.slice(0, 2).map((run) => Date.parse(run.status?.finishedAt ?? ""))),
      )
    } finally {
      watching.abort()
    }
  })

  it("aborts a running Run when spec.stop is set and kills its task", async () => {
    await start()
    const marker = join(dir, "stopped-task-finished")
    await createPipeline("long", script(task("sleep", `sleep 5 && touch ${marker}`)))
    await createRun("long-1", "long")
    await eventually(
      () => getRun("long-1"),
      (run) => run.status?.tasks?.[0]?.status === "running",
      "the task runs",
    )
    const stoppedAt = Date.now()
    await objects.patchNamespacedCustomObject({ ...runs, name: "long-1", body: { spec: { stop: true } } }, merge)
    const run = await finished("long-1")
    expect(Date.now() - stoppedAt).toBeLessThan(3000)
    expect(run.status).toMatchObject({
      phase: "aborted",
      code: 130,
      message: "the run was stopped (spec.stop is true)",
    })
    expect(run.status?.tasks?.[0]).toMatchObject({ path: "tasks/1/sleep", status: "aborted" })
    await new Promise((resolve) => setTimeout(resolve, 200))
    expect(existsSync(marker)).toBe(false)
  })

  it("aborts a queued Run with spec.stop without starting it", async () => {
    await start({ maxInFlight: 1 })
    await createPipeline("blocker", script(task("wait", "sleep 1")))
    await createRun("blocker-1", "blocker")
    await createRun("blocker-2", "blocker")
    await eventually(
      () => getRun("blocker-2"),
      (run) => run.status?.phase === "queued",
      "the second run is queued",
    )
    await objects.patchNamespacedCustomObject({ ...runs, name: "blocker-2", body: { spec: { stop: true } } }, merge)
    const run = await finished("blocker-2")
    expect(run.status).toMatchObject({ phase: "aborted", code: 130 })
    expect(run.status?.startedAt ?? null).toBeNull()
    expect(store.tasks("blocker-2")).toEqual([])
    expect((await finished("blocker-1")).status?.phase).toBe("success")
  })

  it("deletes a pipeline's Runs with it, aborting the one that runs, and their output once it has stopped", async () => {
    await start({ maxInFlight: 1 })
    const marker = join(dir, "cascade-task-finished")
    await createPipeline("doomed", script(task("sleep", `sleep 5 && touch ${marker}`)))
    await createRun("doomed-1", "doomed")
    await createRun("doomed-2", "doomed")
    await eventually(
      () => getRun("doomed-1"),
      (run) => run.status?.tasks?.[0]?.status === "running",
      "it runs",
    )
    await eventually(
      () => getRun("doomed-2"),
      (run) => (run.metadata?.ownerReferences ?? []).length > 0,
      "owned",
    )
    await objects.deleteNamespacedCustomObject({ ...pipelines, name: "doomed" })
    await api.api.settled()
    await eventually(
      async () => (await gone(getRun("doomed-1"))) && (await gone(getRun("doomed-2"))),
      (both) => both,
      "both runs are deleted",
    )
    // Forgotten once its execution has stopped: had the task not been aborted, it would have touched the marker first.
    await eventually(
      async () => store.tasks("doomed-1"),
      (tasks) => tasks.length === 0,
      "the deleted run's tasks are forgotten",
    )
    expect(existsSync(marker)).toBe(false)
    expect(store.output("doomed-1", "tasks/1/sleep", "stdout")).toBe("")
  })

  it("runs the current content and says so when the pipeline moved on from the generation a Run names", async () => {
    await createPipeline("gen", script('console.log("one")'))
    await objects.patchNamespacedCustomObject(
      { ...pipelines, name: "gen", body: { spec: { content: script('console.log("two")') } } },
      merge,
    )
    await createRun("gen-1", "gen", { pipelineGeneration: 1 })
    await start()
    const run = await finished("gen-1")
    expect(run.status?.phase).toBe("success")
    expect(run.status?.conditions?.[0]).toMatchObject({
      type: "PipelineGeneration",
      status: "False",
      reason: "PipelineChanged",
    })
    expect(run.metadata?.annotations?.["runnel.dev/pipeline-generation"]).toBe("2")
    expect(store.output("gen-1", "pipeline/console", "stdout")).toBe("two\n")
  })
})

describe("webhook runs", () => {
  const webhook = {
    provider: "github",
    eventType: "push",
    method: "POST",
    url: "/api/webhooks/hook?ref=main",
    headers: { "x-github-event": "push", "content-type": "application/json" },
    query: { ref: "main" },
    body: '{"ref":"refs/heads/main"}',
  }

  it("writes the pipeline's http.respond() to the Run while the script still runs, then succeeds", async () => {
    await start()
    await createPipeline(
      "hook",
      script(
        "const request = http.request()",
        'http.respond({ status: 202, body: { event: request.headers["X-GitHub-Event"], ref: JSON.parse(request.body).ref } })',
        "console.log(pipelineContext.triggeredBy, webhookTrigger('payload.ref == \"refs/heads/main\"'))",
        task("build", "sleep 2"),
      ),
    )
    await createRun("hook-1", "hook", { trigger: { type: "webhook", webhook } })
    const answered = await eventually(
      () => getRun("hook-1"),
      (run) => run.status?.webhookResponse !== undefined,
      "the response is in the status",
    )
    expect(answered.status?.phase).toBe("running")
    expect(answered.status?.webhookResponse).toEqual({
      status: 202,
      headers: { "content-type": "application/json" },
      body: '{"event":"push","ref":"refs/heads/main"}',
    })
    const run = await finished("hook-1")
    expect(run.status?.phase).toBe("success")
    expect(run.status?.webhookResponse).toEqual(answered.status?.webhookResponse)
    expect(store.output("hook-1", "pipeline/console", "stdout")).toBe("webhook true\n")
  })

  /** Each status a watch saw `name` take, in order, from its creation by `create` until it ended. */
  async function statusesOf(name: string, create: () => Promise<unknown>): Promise<RunObject["status"][]> {
    const statuses: RunObject["status"][] = []
    const watch = await new Watch(api.kubeConfig).watch(
      "/apis/runnel.dev/v1alpha1/namespaces/default/runs",
      {},
      (_type, run: RunObject) => {
        if (run.metadata?.name !== name) return
        if (JSON.stringify(run.status) !== JSON.stringify(statuses.at(-1))) statuses.push(run.status)
      },
      () => {},
    )
    try {
      await create()
      await finished(name)
      await eventually(
        async () => statuses.at(-1)?.phase,
        (phase) => phase !== "running" && phase !== "queued" && phase !== undefined,
        "the watch saw the end",
      )
    } finally {
      watch.abort()
    }
    return statuses
  }

  it("says running and the response in one status write when the script answers at once", async () => {
    await start()
    await createPipeline("answering", script('http.respond({ status: 200, body: "hi" })', task("after", "true")))
    const statuses = await statusesOf("answering-1", () =>
      createRun("answering-1", "answering", { trigger: { type: "webhook", webhook } }),
    )
    expect(statuses.at(-1)?.phase).toBe("success")
    const firstRunning = statuses.find((status) => status?.phase === "running")
    expect(firstRunning?.webhookResponse).toEqual({ status: 200, headers: {}, body: "hi" })
  })

  it("writes a run that answers and ends at once in one status write: its end with the response", async () => {
    await start()
    await createPipeline("one-write", script('http.respond({ status: 200, body: "hi" })'))
    const statuses = await statusesOf("one-write-1", () =>
      createRun("one-write-1", "one-write", { trigger: { type: "webhook", webhook } }),
    )
    // The Run as created (no status yet, or queued), then its end: nothing between.
    const written = statuses.filter((status) => status?.phase !== undefined && status.phase !== "queued")
    expect(written).toHaveLength(1)
    expect(written[0]).toMatchObject({ phase: "success", webhookResponse: { status: 200, headers: {}, body: "hi" } })
  })

  it("writes the response on its own soon after http.respond() when the script goes on without a task", async () => {
    await start()
    await createPipeline(
      "busy",
      script(
        'http.respond({ status: 200, body: "early" })',
        "const until = Date.now() + 3000",
        "while (Date.now() < until) {}",
      ),
    )
    await createRun("busy-1", "busy", { trigger: { type: "webhook", webhook } })
    const answered = await eventually(
      () => getRun("busy-1"),
      (run) => run.status?.webhookResponse !== undefined || run.status?.finishedAt != null,
      "the response or the end is in the status",
    )
    expect(answered.status).toMatchObject({ phase: "running", webhookResponse: { status: 200, body: "early" } })
    expect((await finished("busy-1")).status?.phase).toBe("success")
  })

  it("keeps a response given just before the script ends", async () => {
    await start()
    await createPipeline("quick", script('http.respond({ status: 201, body: "done" })'))
    await createRun("quick-1", "quick", { trigger: { type: "webhook", webhook } })
    const run = await finished("quick-1")
    expect(run.status).toMatchObject({ phase: "success", webhookResponse: { status: 201, headers: {}, body: "done" } })
  })

  it("reads a body too large for the Run from the log store", async () => {
    await start()
    await createPipeline("big", script("console.log(http.request().body.length)"))
    store.attach("big-1", "webhook-body", "x".repeat(600 * 1024))
    const { body: _, ...rest } = webhook
    await createRun("big-1", "big", { trigger: { type: "webhook", webhook: { ...rest, bodyStored: true } } })
    const run = await finished("big-1")
    expect(run.status?.phase).toBe("success")
    expect(store.output("big-1", "pipeline/console", "stdout")).toBe(`${600 * 1024}\n`)
  })

  it("ends a Run as error when its stored body is missing from the log store", async () => {
    await start()
    await createPipeline("lost", script("console.log(http.request().body)"))
    const { body: _, ...rest } = webhook
    await createRun("lost-1", "lost", { trigger: { type: "webhook", webhook: { ...rest, bodyStored: true } } })
    const run = await finished("lost-1")
    expect(run.status).toMatchObject({ phase: "error", code: 2 })
    expect(run.status?.message).toContain("send the webhook again")
  })
})

describe("resuming after a restart", () => {
  /** What an interrupted operator leaves: a Run `running` on known content, and its first task finished in the store. */
  async function interruptedRun(name: string, content: string, recordedContent = content) {
    const counter = join(dir, `${name}.count`)
    await createPipeline(name, content.replaceAll("COUNTER", counter))
    await createRun(`${name}-1`, name)
    await objects.patchNamespacedCustomObject(
      {
        ...runs,
        name: `${name}-1`,
        body: {
          metadata: {
            annotations: {
              "runnel.dev/pipeline-generation": "1",
              "runnel.dev/content-sha256": createHash("sha256")
                .update(recordedContent.replaceAll("COUNTER", counter))
                .digest("hex"),
            },
          },
        },
      },
      merge,
    )
    await objects.patchNamespacedCustomObjectStatus(
      {
        ...runs,
        name: `${name}-1`,
        body: { status: { phase: "running", startedAt: "2025-01-01T00:00:00.000Z" } },
      },
      merge,
    )
    const startedAt = new Date().toISOString()
    store.saveTask({
      runId: `${name}-1`,
      path: "tasks/1/first",
      name: "first",
      status: "success",
      code: 0,
      startedAt,
      endedAt: startedAt,
    })
    store.append(`${name}-1`, "tasks/1/first", "stdout", "first ran\n")
    store.saveTask({
      runId: `${name}-1`,
      path: "tasks/2/second",
      name: "second",
      status: "running",
      code: null,
      startedAt,
      endedAt: null,
    })
    await store.flush()
    return counter
  }

  const threeTasks = script(
    `const first = ${task("first", "echo first >> COUNTER; echo first ran")}`,
    'assert.equal(first.stdout, "first ran\\n")',
    task("second", "echo second >> COUNTER"),
    task("third", "echo third >> COUNTER"),
  )

  it("resumes a Run found running from its first unfinished task", async () => {
    const counter = await interruptedRun("resume", threeTasks)
    await start()
    const run = await finished("resume-1")
    expect(run.status).toMatchObject({ phase: "success", code: 0, startedAt: "2025-01-01T00:00:00.000Z" })
    expect(readFileSync(counter, "utf8")).toBe("second\nthird\n")
    expect(run.status?.tasks?.map((t) => [t.path, t.status])).toEqual([
      ["tasks/1/first", "success"],
      ["tasks/2/second", "success"],
      ["tasks/3/third", "success"],
    ])
  })

  it("closes a Run found running as error when its pipeline changed meanwhile", async () => {
    const counter = await interruptedRun("changed", threeTasks, "export const pipeline = async () => {}\n")
    await start()
    const run = await finished("changed-1")
    expect(run.status).toMatchObject({ phase: "error", code: 2 })
    expect(run.status?.message).toContain('pipeline "changed" changed since it started')
    expect(existsSync(counter)).toBe(false)
  })
})
