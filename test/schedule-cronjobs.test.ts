import { writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { runnel } from "./cli.ts"
import { call, embeddedKubeconfig, eventually, type ServerProcess, serverProcesses } from "./server-process.ts"

// Cronjob mode (--schedules-mode cronjob) against the embedded API, which stores batch/v1 CronJobs
// as Kubernetes does but runs none: the CronJobs are checked as objects, and `runnel schedule fire`
// (what their Jobs run) is run by hand, as a retried Job would run it.

const servers = serverProcesses("runnel-cronjobs-")
afterAll(() => servers.cleanUp())

const yaml = (schedule: string | undefined) => `jobs:
- name: nightly
${schedule === undefined ? "" : `  triggers: {schedule: ${schedule}}\n`}  plan:
  - task: t
    config: {platform: linux, image_resource: {type: registry-image, source: {repository: busybox}}, run: {path: "true"}}
`

const cronJobPath = (name: string) => `/k8s/apis/batch/v1/namespaces/default/cronjobs/${name}`

describe("cronjob mode", () => {
  let server: ServerProcess
  let kubeconfig: string
  beforeAll(async () => {
    server = await servers.start([
      "--allowed-features",
      "*,schedules",
      "--schedules-mode",
      "cronjob",
      "--schedules-image",
      "registry.example/runnel:1.2.3",
    ])
    kubeconfig = join(server.cwd, "kubeconfig")
    writeFileSync(kubeconfig, embeddedKubeconfig(server.url))
  })

  it("mirrors a cron schedule as a CronJob owned by the Schedule that follows enable, pause and deletion", async () => {
    expect(
      (
        await call(server.url, "PUT", "/api/pipelines/cj", {
          content: yaml("{cron: '0 9 * * *', timezone: Europe/Paris}"),
        })
      ).status,
    ).toBe(201)
    const cronJob = await eventually(
      () => call(server.url, "GET", cronJobPath("cj-nightly")),
      (answer) => answer.status === 200,
      "the CronJob exists",
    )
    const schedule = (
      await call(server.url, "GET", "/k8s/apis/runnel.dev/v1alpha1/namespaces/default/schedules/cj-nightly")
    ).body
    expect(cronJob.body.spec).toMatchObject({
      schedule: "0 9 * * *",
      timeZone: "Europe/Paris",
      suspend: false,
      concurrencyPolicy: "Allow",
      startingDeadlineSeconds: 300,
      successfulJobsHistoryLimit: 3,
      failedJobsHistoryLimit: 1,
    })
    expect(cronJob.body.metadata.ownerReferences).toEqual([
      expect.objectContaining({ kind: "Schedule", name: "cj-nightly", uid: schedule.metadata.uid, controller: true }),
    ])
    const pod = cronJob.body.spec.jobTemplate.spec.template.spec
    expect(pod.serviceAccountName).toBe("runnel-schedule-fire")
    expect(pod.containers[0]).toMatchObject({
      image: "registry.example/runnel:1.2.3",
      args: ["schedule", "fire", "default/cj-nightly", "--job-name", "$(JOB_NAME)"],
    })

    const suspended = (want: boolean, what: string) =>
      eventually(
        () => call(server.url, "GET", cronJobPath("cj-nightly")),
        (answer) => answer.body?.spec?.suspend === want,
        what,
      )
    expect(
      (await call(server.url, "PUT", `/api/schedules/${schedule.metadata.uid}/enabled`, { enabled: false })).status,
    ).toBe(200)
    await suspended(true, "the disabled schedule's CronJob is suspended")
    await call(server.url, "PUT", `/api/schedules/${schedule.metadata.uid}/enabled`, { enabled: true })
    await suspended(false, "the enabled schedule's CronJob runs again")
    await call(server.url, "POST", "/api/pipelines/cj/pause")
    await suspended(true, "a paused pipeline's CronJob is suspended")
    await call(server.url, "POST", "/api/pipelines/cj/unpause")
    await suspended(false, "an unpaused pipeline's CronJob runs again")

    // The Schedule shows when its CronJob fires next.
    const [listed] = (await call(server.url, "GET", "/api/pipelines/cj/schedules")).body
    expect(new Date(listed.next_run_at).toLocaleString("en-GB", { timeZone: "Europe/Paris", timeStyle: "short" })).toBe(
      "09:00",
    )

    // The job leaves the YAML: the Schedule is deleted, and its CronJob with it.
    await call(server.url, "PUT", "/api/pipelines/cj", { content: yaml(undefined) })
    await eventually(
      () => call(server.url, "GET", cronJobPath("cj-nightly")),
      (answer) => answer.status === 404,
      "the CronJob goes with its Schedule",
    )
  }, 60_000)

  it("keeps interval schedules on the timer, without a CronJob", async () => {
    await call(server.url, "PUT", "/api/pipelines/iv", { content: yaml("{every: 1s}") })
    const runs = await eventually(
      () => call(server.url, "GET", "/api/runs?pipeline_id=iv"),
      (answer) => answer.body.total_items >= 1,
      "the interval schedule fired",
    )
    expect(runs.body.items[0]).toMatchObject({ trigger_type: "schedule", triggered_by: "iv-nightly" })
    expect((await call(server.url, "GET", cronJobPath("iv-nightly"))).status).toBe(404)
    await call(server.url, "DELETE", "/api/pipelines/iv")
  }, 30_000)

  it("runnel schedule fire creates the tick's Run once, however often it runs", async () => {
    await call(server.url, "PUT", "/api/pipelines/fired", { content: yaml("{cron: '*/5 * * * *'}") })
    await eventually(
      () => call(server.url, "GET", "/api/pipelines/fired/schedules"),
      (answer) => answer.body.length === 1,
      "the schedule exists",
    )
    const dueMs = Math.floor(Date.now() / 300_000) * 300_000
    const due = new Date(dueMs).toISOString()
    const fire = (...args: string[]) =>
      runnel(["schedule", "fire", "default/fired-nightly", ...args, "--kubeconfig", kubeconfig])
    const first = await fire("--due", due)
    expect(first).toMatchObject({ code: 0, stdout: `run "fired-nightly-${dueMs / 1000}" created for ${due}\n` })
    // A retried Job: the same tick, from the Job's name (<cronjob>-<scheduled minute>).
    const second = await fire("--job-name", `fired-nightly-${dueMs / 60_000}`)
    expect(second).toMatchObject({ code: 0, stdout: `run "fired-nightly-${dueMs / 1000}" already exists for ${due}\n` })
    const runs = (await call(server.url, "GET", "/api/runs?pipeline_id=fired")).body
    expect(runs.total_items).toBe(1)
    expect(runs.items[0]).toMatchObject({
      id: `fired-nightly-${dueMs / 1000}`,
      trigger_type: "schedule",
      triggered_by: "fired-nightly",
    })

    const notATick = await fire("--due", new Date(dueMs + 60_000).toISOString())
    expect(notATick.code).not.toBe(0)
    expect(notATick.stderr).toContain('is not a due time of schedule "fired-nightly" (*/5 * * * *)')
  }, 60_000)

  it("shows pipeline, type, expression, enabled, last and next run to kubectl get schedules", async () => {
    await call(server.url, "PUT", "/api/pipelines/shown", { content: yaml("{every: 1h}") })
    const table = await eventually(
      async () => {
        const response = await fetch(
          `${server.url}/k8s/apis/runnel.dev/v1alpha1/namespaces/default/schedules/shown-nightly`,
          {
            headers: { Accept: "application/json;as=Table;v=v1;g=meta.k8s.io" },
          },
        )
        return (await response.json()) as { columnDefinitions: { name: string }[]; rows: { cells: unknown[] }[] }
      },
      (answer) => typeof answer.rows?.[0]?.cells[5] === "string" && answer.rows[0]?.cells[5] !== "",
      "the schedule shows its next run",
    )
    expect(table.columnDefinitions.slice(0, 7).map((column) => column.name)).toEqual([
      "Name",
      "Pipeline",
      "Type",
      "Expression",
      "Enabled",
      "Next Run",
      "Last Run",
    ])
    expect(table.rows[0]?.cells.slice(0, 5)).toEqual(["shown-nightly", "shown", "interval", "1h", true])
  }, 30_000)
})
