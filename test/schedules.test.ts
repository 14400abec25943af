import { type ChildProcess, spawn } from "node:child_process"
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { parse } from "yaml"
import { root, runnel, runnelBin } from "./cli.ts"
import { call, embeddedKubeconfig, eventually, type ServerProcess, script, serverProcesses } from "./server-process.ts"

// Schedules end to end: real `runnel server` processes over HTTP, the embedded API at /k8s, the CLI.
// Lateness is measured from what a user sees: the schedule's next_run_at before the tick, against
// the tick's Run (its fired-at annotation, written when the operator created it, and its created_at).

const servers = serverProcesses("runnel-schedules-")
afterAll(() => servers.cleanUp())

const yaml = (schedule: string, job = "tick") => `jobs:
- name: ${job}
  triggers: {schedule: ${schedule}}
  plan:
  - task: t
    config: {platform: linux, image_resource: {type: registry-image, source: {repository: busybox}}, run: {path: "true"}}
`

type KubeRun = {
  metadata: { name: string; creationTimestamp: string; annotations?: Record<string, string> }
  spec: { trigger?: { type?: string; by?: string; args?: string[]; jobs?: string[] } }
}

/** The Runs one Schedule started, read from the embedded API as kubectl would. */
async function scheduledRuns(base: string, schedule: string): Promise<KubeRun[]> {
  const answer = await call(
    base,
    "GET",
    `/k8s/apis/runnel.dev/v1alpha1/namespaces/default/runs?labelSelector=${encodeURIComponent(`runnel.dev/schedule=${schedule}`)}`,
  )
  expect(answer.status).toBe(200)
  return answer.body.items
}

const dueOf = (run: KubeRun) => Date.parse(run.metadata.annotations?.["runnel.dev/due-at"] ?? "")
const firedOf = (run: KubeRun) => Date.parse(run.metadata.annotations?.["runnel.dev/fired-at"] ?? "")

async function schedulesOf(base: string, pipeline: string) {
  const answer = await call(base, "GET", `/api/pipelines/${pipeline}/schedules`)
  expect(answer.status).toBe(200)
  return answer.body as {
    id: string
    name: string
    enabled: boolean
    next_run_at: string | null
    last_run_at: string | null
  }[]
}

/** Waits for the tick the schedule shows as next, and answers it with its Run and how late it fired. */
async function nextTick(base: string, pipeline: string, schedule: string) {
  const [shown] = await eventually(
    () => schedulesOf(base, pipeline),
    (list) => typeof list[0]?.next_run_at === "string",
    "the schedule shows its next run",
  )
  const dueMs = Date.parse(shown?.next_run_at ?? "")
  const runs = await eventually(
    () => scheduledRuns(base, schedule),
    (list) => list.some((run) => dueOf(run) === dueMs),
    `the run of the tick at ${shown?.next_run_at} exists`,
    dueMs - Date.now() + 15_000,
  )
  const run = runs.find((candidate) => dueOf(candidate) === dueMs) as KubeRun
  return { dueMs, run, lateMs: firedOf(run) - dueMs }
}

const lateness: number[] = []
afterAll(() => {
  if (lateness.length > 0) {
    const sorted = [...lateness].sort((a, b) => a - b)
    console.log(
      `schedule lateness over ${sorted.length} ticks (ms after next_run_at): min ${sorted[0]}, median ${sorted[Math.floor(sorted.length / 2)]}, max ${sorted.at(-1)}`,
    )
  }
})

describe("a server with the schedules feature", () => {
  let server: ServerProcess
  beforeAll(async () => {
    server = await servers.start(["--allowed-features", "*,schedules"])
  })

  it("fires an every: 2s schedule within a second of each due time, and pause and unpause stop and resume it", async () => {
    const stored = await call(server.url, "PUT", "/api/pipelines/every", { content: yaml("{every: 2s}") })
    expect(stored.status).toBe(201)
    const [listed] = await schedulesOf(server.url, "every")
    expect(listed).toMatchObject({
      pipeline_id: stored.body.id,
      name: "every-tick",
      schedule_type: "interval",
      schedule_expr: "2s",
      job_name: "tick",
      enabled: true,
    })
    for (let tick = 0; tick < 3; tick++) {
      const { dueMs, run, lateMs } = await nextTick(server.url, "every", "every-tick")
      lateness.push(lateMs)
      expect(lateMs).toBeGreaterThanOrEqual(0)
      expect(lateMs).toBeLessThan(1000)
      // created_at has whole seconds: within the second of the due time.
      expect(Date.parse(run.metadata.creationTimestamp) - dueMs).toBeLessThan(1000)
      const view = await call(server.url, "GET", `/api/runs/${run.metadata.name}`)
      expect(view.body).toMatchObject({ trigger_type: "schedule", triggered_by: "every-tick", pipeline_name: "every" })
      expect(run.spec.trigger?.jobs).toEqual(["tick"])
    }
    const lastRun = (await schedulesOf(server.url, "every"))[0]?.last_run_at
    expect(typeof lastRun).toBe("string")

    const pausedAtMs = Date.now()
    const paused = await runnel(["pipeline", "schedule", "pause", "every", "tick", "-s", server.url])
    expect(paused).toMatchObject({ code: 0, stdout: 'schedule "every-tick" of pipeline "every" paused\n' })
    await eventually(
      () => schedulesOf(server.url, "every"),
      (list) => list[0]?.enabled === false && list[0]?.next_run_at === null,
      "the paused schedule shows no next run",
    )
    const countAtPause = (await scheduledRuns(server.url, "every-tick")).length
    // Three ticks' worth of time, and one more second for a tick that was being fired when paused.
    await new Promise((resolve) => setTimeout(resolve, 7000))
    const afterPause = await scheduledRuns(server.url, "every-tick")
    expect(afterPause.length).toBeLessThanOrEqual(countAtPause + 1)
    expect(afterPause.every((run) => dueOf(run) <= pausedAtMs + 2000)).toBe(true)

    const unpaused = await runnel(["pipeline", "schedule", "unpause", "every", "every-tick", "-s", server.url])
    expect(unpaused.code).toBe(0)
    const resumed = await nextTick(server.url, "every", "every-tick")
    lateness.push(resumed.lateMs)
    expect(resumed.lateMs).toBeLessThan(1000)
    const ls = await runnel(["pipeline", "schedule", "ls", "every", "-s", server.url])
    expect(ls.stdout).toMatch(
      /^NAME +JOB +TYPE +EXPRESSION +ENABLED +LAST RUN +NEXT RUN\nevery-tick +tick +interval +2s +yes +\S+Z +\S+Z\n$/,
    )
  }, 90_000)

  it("fires a cron schedule with a seconds field once per tick", async () => {
    expect(
      (await call(server.url, "PUT", "/api/pipelines/secs", { content: yaml('{cron: "*/3 * * * * *"}') })).status,
    ).toBe(201)
    const first = await nextTick(server.url, "secs", "secs-tick")
    const second = await nextTick(server.url, "secs", "secs-tick")
    lateness.push(first.lateMs, second.lateMs)
    expect(first.lateMs).toBeLessThan(1000)
    expect(new Date(first.dueMs).getUTCSeconds() % 3).toBe(0)
    expect(second.dueMs - first.dueMs).toBe(3000)
    const runs = await scheduledRuns(server.url, "secs-tick")
    const ticks = runs.map(dueOf)
    expect(new Set(ticks).size).toBe(ticks.length)
    expect(ticks.filter((due) => due === first.dueMs)).toHaveLength(1)
  }, 60_000)

  it("keeps enabled when the same YAML is stored again, and deletes a schedule whose job is gone", async () => {
    await call(server.url, "PUT", "/api/pipelines/keep", { content: yaml("{every: 1h}") })
    const [schedule] = await eventually(
      () => schedulesOf(server.url, "keep"),
      (list) => list.length === 1,
      "one schedule",
    )
    expect(await call(server.url, "PUT", `/api/schedules/${schedule?.id}/enabled`, { enabled: false })).toMatchObject({
      status: 200,
      body: { status: "ok" },
    })
    await call(server.url, "PUT", "/api/pipelines/keep", { content: `${yaml("{every: 1h}")}# stored again\n` })
    await eventually(
      () => call(server.url, "GET", "/k8s/apis/runnel.dev/v1alpha1/namespaces/default/pipelines/keep"),
      ({ body }) => body.metadata.generation === 2 && body.status?.observedGeneration === 2,
      "the operator reconciled the stored-again pipeline",
    )
    expect((await schedulesOf(server.url, "keep"))[0]).toMatchObject({ id: schedule?.id, enabled: false })
    const noSchedule = yaml("{every: 1h}").replace("  triggers: {schedule: {every: 1h}}\n", "")
    await call(server.url, "PUT", "/api/pipelines/keep", { content: noSchedule })
    await eventually(
      () => schedulesOf(server.url, "keep"),
      (list) => list.length === 0,
      "the schedule goes with its job",
    )
  }, 30_000)

  it("fires a Schedule applied with kubectl for a script pipeline, with its args, on the whole pipeline", async () => {
    expect((await call(server.url, "PUT", "/api/pipelines/scripted", { content: script("true") })).status).toBe(201)
    const created = await call(server.url, "POST", "/k8s/apis/runnel.dev/v1alpha1/namespaces/default/schedules", {
      apiVersion: "runnel.dev/v1alpha1",
      kind: "Schedule",
      metadata: { name: "scripted-often" },
      spec: { pipelineRef: { name: "scripted" }, type: "interval", expression: "1s", args: ["--fast"] },
    })
    expect(created.status).toBe(201)
    const { run, lateMs } = await nextTick(server.url, "scripted", "scripted-often")
    lateness.push(lateMs)
    expect(lateMs).toBeLessThan(1000)
    expect(run.spec.trigger).toEqual({ type: "schedule", by: "scripted-often", args: ["--fast"] })
    expect((await call(server.url, "GET", `/api/runs/${run.metadata.name}`)).body.args).toEqual(["--fast"])
    // Deleting the pipeline takes the Schedule it does not own, too.
    expect((await call(server.url, "DELETE", "/api/pipelines/scripted")).status).toBe(204)
    const gone = await call(
      server.url,
      "GET",
      "/k8s/apis/runnel.dev/v1alpha1/namespaces/default/schedules/scripted-often",
    )
    expect(gone.status).toBe(404)
  }, 30_000)

  it("refuses bad schedules when the pipeline is stored, and bad toggles, with messages naming the field", async () => {
    const badCron = await call(server.url, "PUT", "/api/pipelines/bad", {
      content: yaml('{cron: "61 * * * *"}', "nightly"),
    })
    expect(badCron.status).toBe(400)
    expect(badCron.body.error).toContain("jobs[0].triggers.schedule.cron")
    expect(badCron.body.error).toContain("Constraint error, got value 61 expected range 0-59")
    const short = await call(server.url, "PUT", "/api/pipelines/bad", { content: yaml("{every: 500ms}") })
    expect(short).toMatchObject({ status: 400, body: { error: expect.stringContaining("must be at least 1s") } })

    // kubectl: the same content is kept, with Ready=False and the message.
    const k8s = "/k8s/apis/runnel.dev/v1alpha1/namespaces/default"
    const applied = await call(server.url, "POST", `${k8s}/pipelines`, {
      apiVersion: "runnel.dev/v1alpha1",
      kind: "Pipeline",
      metadata: { name: "bad-applied" },
      spec: { content: yaml('{cron: "61 * * * *"}', "nightly") },
    })
    expect(applied.status).toBe(201)
    const notReady = await eventually(
      () => call(server.url, "GET", `${k8s}/pipelines/bad-applied`),
      ({ body }) => body.status?.conditions?.some((c: { type: string }) => c.type === "Ready"),
      "the applied pipeline has a Ready condition",
    )
    expect(notReady.body.status.conditions).toContainEqual(
      expect.objectContaining({
        type: "Ready",
        status: "False",
        message: expect.stringContaining("expected range 0-59"),
      }),
    )
    // A Schedule applied with a bad expression says so in its own Ready condition, and never fires.
    await call(server.url, "PUT", "/api/pipelines/target", { content: script("true") })
    await call(server.url, "POST", `${k8s}/schedules`, {
      apiVersion: "runnel.dev/v1alpha1",
      kind: "Schedule",
      metadata: { name: "target-bad" },
      spec: { pipelineRef: { name: "target" }, type: "interval", expression: "500ms" },
    })
    const badSchedule = await eventually(
      () => call(server.url, "GET", `${k8s}/schedules/target-bad`),
      ({ body }) => body.status?.conditions !== undefined,
      "the bad schedule has a Ready condition",
    )
    // A merge patch's null removes the field: no next run.
    expect(badSchedule.body.status.nextRunAt).toBeUndefined()
    expect(badSchedule.body.status).toMatchObject({
      conditions: [
        expect.objectContaining({
          type: "Ready",
          status: "False",
          reason: "InvalidExpression",
          message: 'interval "500ms" is shorter than one second; write 1s or more',
        }),
      ],
    })

    await call(server.url, "PUT", "/api/pipelines/toggled", { content: yaml("{every: 1h}") })
    const [schedule] = await eventually(
      () => schedulesOf(server.url, "toggled"),
      (list) => list.length === 1,
      "one schedule",
    )
    const path = `/api/schedules/${schedule?.id}/enabled`
    for (const [body, raw] of [[{ enabled: "yes" }], [{}], [undefined, "{enabled: true"]] as const) {
      const answer = await call(server.url, "PUT", path, body, raw)
      expect(answer.status).toBe(400)
      expect(answer.body.error).toContain('"enabled"')
    }
    expect((await call(server.url, "PUT", "/api/schedules/nope/enabled", { enabled: true })).status).toBe(404)
    expect((await call(server.url, "GET", "/api/pipelines/nope/schedules")).status).toBe(404)
    const cliMiss = await runnel(["pipeline", "schedule", "pause", "toggled", "nope", "-s", server.url])
    expect(cliMiss.code).not.toBe(0)
    expect(cliMiss.stderr).toContain('pipeline "toggled" has no schedule "nope"; its schedules: toggled-tick')
  }, 30_000)

  it("fires nothing for a paused pipeline", async () => {
    await call(server.url, "PUT", "/api/pipelines/held", { content: yaml("{every: 1s}") })
    // A tick may come between the PUT and the pause, and one being fired as the pause lands may still start.
    const pausedAtMs = Date.now()
    expect((await call(server.url, "POST", "/api/pipelines/held/pause")).status).toBe(200)
    await eventually(
      () => schedulesOf(server.url, "held"),
      (list) => list.length === 1 && list[0]?.next_run_at === null,
      "the paused pipeline's schedule shows no next run",
    )
    const shownAtMs = Date.now()
    await new Promise((resolve) => setTimeout(resolve, 3500))
    const runs = await scheduledRuns(server.url, "held-tick")
    expect(runs.filter((run) => dueOf(run) > pausedAtMs + 1000 || firedOf(run) > shownAtMs)).toEqual([])
  }, 30_000)
})

describe("a server without the schedules feature", () => {
  it("stores and lists schedules but fires none", async () => {
    const server = await servers.start([])
    expect((await call(server.url, "GET", "/api/features")).body.features).not.toContain("schedules")
    await call(server.url, "PUT", "/api/pipelines/off", { content: yaml("{every: 1s}") })
    const [listed] = await eventually(
      () => schedulesOf(server.url, "off"),
      (list) => list.length === 1,
      "the schedule is listed",
    )
    expect(listed).toMatchObject({ name: "off-tick", enabled: true, last_run_at: null })
    // Three ticks' worth of time after the schedule exists.
    await new Promise((resolve) => setTimeout(resolve, 3500))
    expect(await scheduledRuns(server.url, "off-tick")).toEqual([])
    expect((await call(server.url, "GET", "/api/runs?pipeline_id=off")).body.total_items).toBe(0)
    server.child.kill("SIGTERM")
  }, 30_000)
})

describe("exactly once", () => {
  // Killed at the due time, the tick's Run is usually not created yet (the restart must fire it);
  // killed the moment the Run exists, the status does not say so yet (the restart must not fire it again).
  it.each([
    ["at its due time", "due"],
    ["the moment the tick's Run exists", "created"],
  ] as const)(
    "creates one run for a tick when the server is killed (SIGKILL) %s and restarted",
    async (_, killAt) => {
      const db = join(mkdtempSync(join(servers.dir, "restart-")), "runnel.db")
      const args = ["--allowed-features", "*,schedules", "--storage-sqlite-path", db]
      const first = await servers.start(args)
      // A tick every 20 s: the restart (a few seconds on a loaded machine) ends before the next one.
      await call(first.url, "PUT", "/api/pipelines/crash", { content: yaml('{cron: "*/20 * * * * *"}') })
      const [shown] = await eventually(
        () => schedulesOf(first.url, "crash"),
        (list) => typeof list[0]?.next_run_at === "string",
        "the schedule shows its next run",
      )
      const dueMs = Date.parse(shown?.next_run_at ?? "")
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, dueMs - Date.now())))
      if (killAt === "created") {
        const deadline = Date.now() + 10_000
        while (!(await scheduledRuns(first.url, "crash-tick")).some((run) => dueOf(run) === dueMs)) {
          if (Date.now() > deadline) throw new Error("the tick's run never appeared before the kill")
        }
      }
      first.child.kill("SIGKILL")
      const killedLateMs = Date.now() - dueMs
      await new Promise((resolve) => first.child.once("exit", resolve))
      const second = await servers.start(args)
      const runs = await eventually(
        () => scheduledRuns(second.url, "crash-tick"),
        (list) => list.some((run) => dueOf(run) === dueMs),
        "the tick's run exists after the restart",
      )
      // The restarted operator has armed the next tick, so it is past deciding about this one.
      await eventually(
        () => schedulesOf(second.url, "crash"),
        (list) => Date.parse(list[0]?.next_run_at ?? "") > dueMs,
        "the schedule moved on",
      )
      const again = await scheduledRuns(second.url, "crash-tick")
      expect(again.filter((run) => dueOf(run) === dueMs)).toHaveLength(1)
      expect(runs.filter((run) => dueOf(run) === dueMs)).toHaveLength(1)
      console.log(
        `killed ${killedLateMs} ms after the due time (${killAt}); the tick's run was fired ${firedOf(again[0] as KubeRun) - dueMs} ms after it`,
      )
      second.child.kill("SIGTERM")
    },
    90_000,
  )

  it("creates one run per tick with two operators against the same embedded API", async () => {
    const server = await servers.start(["--allowed-features", "*,schedules"])
    const dir = mkdtempSync(join(servers.dir, "operator-"))
    const kubeconfig = join(dir, "kubeconfig")
    writeFileSync(kubeconfig, embeddedKubeconfig(server.url))
    const operator: ChildProcess = spawn(
      runnelBin,
      [
        "operator",
        "--kubeconfig",
        kubeconfig,
        "--allowed-features",
        "*,schedules",
        "--driver",
        "native",
        "--storage-sqlite-path",
        join(dir, "runnel.db"),
      ],
      { cwd: dir, stdio: ["ignore", "pipe", "pipe"] },
    )
    let operatorLog = ""
    operator.stderr?.setEncoding("utf8").on("data", (text: string) => {
      operatorLog += text
    })
    try {
      await eventually(
        async () => operatorLog,
        (log) => log.includes("operator.started"),
        "the second operator started",
      )
      await call(server.url, "PUT", "/api/pipelines/raced", { content: script("true") })
      await call(server.url, "POST", "/k8s/apis/runnel.dev/v1alpha1/namespaces/default/schedules", {
        apiVersion: "runnel.dev/v1alpha1",
        kind: "Schedule",
        metadata: { name: "raced-often" },
        spec: { pipelineRef: { name: "raced" }, type: "interval", expression: "1s" },
      })
      // Both operators race for the ticks: each creates some or finds them created. On a loaded machine the
      // second may see the Schedule seconds after the first, so the ticks are counted until both have raced.
      const raced = /"msg":"schedule\.(fired|already-fired)","schedule":"raced-often"/
      await eventually(
        async () => ({
          ticks: (await scheduledRuns(server.url, "raced-often")).length,
          server: raced.test(server.stderr()),
          operator: raced.test(operatorLog),
        }),
        (seen) => seen.ticks >= 6 && seen.server && seen.operator,
        "six ticks fired and both operators raced for one",
        60_000,
      )
      const runs = await scheduledRuns(server.url, "raced-often")
      const ticks = runs.map(dueOf).sort((a, b) => a - b)
      expect(new Set(ticks).size).toBe(ticks.length)
      // No tick was skipped between the first and the last.
      expect(((ticks.at(-1) as number) - (ticks[0] as number)) / 1000 + 1).toBe(ticks.length)
    } finally {
      operator.kill("SIGKILL")
      server.child.kill("SIGTERM")
    }
  }, 90_000)
})

describe("examples/k8s/schedule-hello.yaml", () => {
  it("applies as written and shows its next run at 09:00 in Paris on a weekday", async () => {
    const server = await servers.start(["--allowed-features", "*,schedules"])
    for (const file of ["pipeline-hello.yaml", "schedule-hello.yaml"]) {
      const object = parse(readFileSync(join(root, "examples", "k8s", file), "utf8"))
      const plural = object.kind === "Pipeline" ? "pipelines" : "schedules"
      const created = await call(
        server.url,
        "POST",
        `/k8s/apis/runnel.dev/v1alpha1/namespaces/default/${plural}`,
        object,
      )
      expect(created.status).toBe(201)
    }
    const [schedule] = await eventually(
      () => schedulesOf(server.url, "hello"),
      (list) => typeof list[0]?.next_run_at === "string",
      "the schedule shows its next run",
    )
    const next = new Date(schedule?.next_run_at ?? "")
    const paris = new Intl.DateTimeFormat("en-GB", {
      timeZone: "Europe/Paris",
      weekday: "short",
      hour: "2-digit",
      minute: "2-digit",
      hourCycle: "h23",
    })
    expect(paris.format(next)).toMatch(/^(Mon|Tue|Wed|Thu|Fri) 09:00$/)
    expect(schedule).toMatchObject({ name: "hello-weekday-mornings", enabled: true, last_run_at: null })
    server.child.kill("SIGTERM")
  }, 30_000)
})
