import { mkdtempSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { runnel, startRunnel } from "./cli.ts"
import { call, eventually, runToEnd, type ServerProcess, serverProcesses } from "./server-process.ts"

// `runnel run ls|logs|tasks|stop` against bin/runnel server in its own process (native driver, temp database).
const servers = serverProcesses("runnel-run-cli-test-")
afterAll(() => servers.cleanUp())

/** A script whose task prints `first`, waits until `file` exists, prints `second` and fails with 3. */
const waiting = (file: string) => `export const pipeline = async () => {
  console.log("script says hi")
  const step = await runtime.run({ name: "step", image: "busybox", command: { path: "sh", args: ["-c", ${JSON.stringify(
    `echo first; echo oops >&2; while [ ! -e ${file} ]; do sleep 0.05; done; echo second; exit 3`,
  )}] } })
  if (step.code !== 0) throw new Error("step failed with " + step.code)
}
`

describe("runnel run", () => {
  let server: ServerProcess
  let work: string
  const cli = (args: readonly string[]) => runnel(["run", ...args, "-s", server.url])
  /** A run of the waiting pipeline that is still running, and the file that lets it go on. */
  const startWaiting = async () => {
    const gate = join(work, `go-${Math.random().toString(36).slice(2)}`)
    await call(server.url, "PUT", "/api/pipelines/waiting", { content: waiting(gate), content_type: "ts" })
    const runId = (await call(server.url, "POST", "/api/pipelines/waiting/trigger")).body.run_id as string
    await eventually(
      () => call(server.url, "GET", `/api/runs/${runId}`),
      (answer) => answer.body.status === "running",
      "the run starts",
    )
    return { runId, release: () => writeFileSync(gate, "") }
  }

  beforeAll(async () => {
    server = await servers.start()
    work = mkdtempSync(join(servers.dir, "work-"))
    await call(server.url, "PUT", "/api/pipelines/hello", {
      content: `export const pipeline = async () => {
  await runtime.run({ name: "greet", image: "busybox", command: { path: "sh", args: ["-c", "echo hello; echo world"] } })
}
`,
      content_type: "ts",
    })
  }, 30_000)

  it("ls lists runs newest first, filters by pipeline and status, and prints JSON with --json", async () => {
    const { run } = await runToEnd(server.url, "hello")
    const table = await cli(["ls", "--pipeline", "hello"])
    expect(table.code).toBe(0)
    expect(table.stdout.split("\n")[0]).toMatch(/^ID\s+PIPELINE\s+STATUS\s+CODE\s+TRIGGER\s+CREATED\s+DURATION$/)
    expect(table.stdout).toMatch(new RegExp(`${run.id}\\s+hello\\s+success\\s+0\\s+manual`))
    const json = await cli(["ls", "--status", "success", "--json"])
    expect(json.code).toBe(0)
    const runs = JSON.parse(json.stdout)
    expect(runs.map((r: { id: string }) => r.id)).toContain(run.id)
    expect(runs.every((r: { status: string }) => r.status === "success")).toBe(true)
    expect((await cli(["ls", "--status", "aborted"])).stdout).toBe("no runs match\n")
    const bad = await cli(["ls", "--status", "done"])
    expect(bad.code).toBe(1)
    expect(bad.stderr).toContain("?status=done is not a run status; known: queued, running")
  })

  it("tasks lists a run's tasks with status and code, and --json gives them without output", async () => {
    const { run } = await runToEnd(server.url, "hello")
    const table = await cli(["tasks", run.id])
    expect(table.code).toBe(0)
    expect(table.stdout).toMatch(/^PATH\s+STATUS\s+CODE\s+STARTED\s+DURATION\n/)
    expect(table.stdout).toMatch(/tasks\/1\/greet\s+success\s+0\s+\d{4}-/)
    const json = JSON.parse((await cli(["tasks", run.id, "--json"])).stdout)
    expect(json).toContainEqual(expect.objectContaining({ path: "tasks/1/greet", status: "success", code: 0 }))
    expect(json[0]).not.toHaveProperty("stdout")
    const bad = await call(server.url, "GET", `/api/runs/${run.id}/tasks?output=maybe`)
    expect(bad.status).toBe(400)
    expect(bad.body.error).toBe("?output=maybe is not valid; give true (the default) or false")
    const missing = await cli(["tasks", "run-nope"])
    expect(missing.code).toBe(1)
    expect(missing.stderr).toBe('runnel: run "run-nope" not found\n')
  })

  it("logs prints a finished run's output with each line labelled by its task, and --task keeps one task", async () => {
    const { run } = await runToEnd(server.url, "hello")
    const logs = await cli(["logs", run.id])
    expect(logs.code).toBe(0)
    expect(logs.stdout).toBe("greet | hello\ngreet | world\n")
    expect(logs.stderr).toContain(`run ${run.id} ended with exit code 0`)
    const events = (await cli(["logs", run.id, "--json"])).stdout
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line))
    expect(events).toContainEqual({ stream: "stdout", data: expect.stringContaining("hello"), path: "tasks/1/greet" })
    expect(events.at(-1)).toEqual({ event: "exit", code: 0, run_id: run.id })
    const unknown = await cli(["logs", run.id, "--task", "tasks/9/nope"])
    expect(unknown.code).toBe(2)
    expect(unknown.stderr).toContain(`run ${run.id} has no task "tasks/9/nope"; its tasks: tasks/1/greet`)
  })

  it("logs -f replays a running run, follows it live, and exits with the run's exit code", async () => {
    const { runId, release } = await startWaiting()
    const follow = startRunnel(["run", "logs", runId, "-f", "-s", server.url])
    // The replayed part arrives while the task still waits; only then does it go on.
    await eventually(
      async () => follow.stdout(),
      (text) => text.includes("step | first"),
      "the replayed output is printed",
    )
    expect(follow.stdout()).not.toContain("second")
    release()
    const { code, stdout, stderr } = await follow.done
    expect(code).toBe(1)
    expect(stdout).toContain("script says hi\n")
    expect(stdout).toMatch(/step \| first\n(.|\n)*step \| second\n/)
    expect(stderr).toContain("step | oops\n")
    expect(stderr).toContain(`run ${runId} ended with exit code 1`)
  })

  it("logs without -f prints what a running run stored so far and says how to follow it", async () => {
    const { runId, release } = await startWaiting()
    await eventually(
      () => call(server.url, "GET", `/api/runs/${runId}/tasks`),
      (answer) => answer.body.some((task: { stdout: string }) => task.stdout.includes("first")),
      "the first line is stored",
    )
    const logs = await cli(["logs", runId, "--task", "tasks/1/step"])
    expect(logs.code).toBe(0)
    expect(logs.stdout).toBe("step | first\n")
    expect(logs.stderr).toContain(`run ${runId} is running; follow it with \`runnel run logs ${runId} -f\``)
    release()
  })

  it("stop aborts a running run, --json gives the run, and a finished run is refused with the reason", async () => {
    const { runId } = await startWaiting()
    const stop = await cli(["stop", runId])
    expect(stop.code).toBe(0)
    expect(stop.stdout).toMatch(new RegExp(`^run ${runId} (stopping|aborted)\\n$`))
    await eventually(
      () => call(server.url, "GET", `/api/runs/${runId}`),
      (answer) => answer.body.status === "aborted",
      "the run is aborted",
    )
    const follow = await cli(["logs", runId, "-f"])
    expect(follow.code).toBe(130)
    const other = await startWaiting()
    const json = JSON.parse((await cli(["stop", other.runId, "--json"])).stdout)
    expect(json).toMatchObject({ id: other.runId, pipeline_name: "waiting", trigger_type: "manual" })
    const again = await cli(["stop", runId])
    expect(again.code).toBe(1)
    expect(again.stderr).toBe(
      `runnel: run "${runId}" has already finished with status aborted; there is nothing to stop\n`,
    )
  })
})
