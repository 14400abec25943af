import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { describePrivateDockerd, type PrivateDockerd, privateDockerd } from "./private-dockerd.ts"
import { call, eventually, type ServerProcess, serverProcesses } from "./server-process.ts"

// The daemon is the test's own: stopping the shared one would break every other test on the machine.
describePrivateDockerd("the Docker daemon restarts while tasks run", () => {
  const servers = serverProcesses("runnel-docker-restart-")
  let daemon: PrivateDockerd
  let server: ServerProcess
  beforeAll(async () => {
    daemon = await privateDockerd()
  }, 120_000)
  afterAll(async () => {
    servers.cleanUp()
    await daemon?.close()
  })

  // The kubernetes driver on the embedded API: its kubelet runs the Pods' containers on the same daemon.
  describe.each(["docker", "kubernetes"])("with --driver %s", (driver) => {
    beforeAll(async () => {
      server = await servers.start(["--driver", driver], ["server"], undefined, { DOCKER_HOST: daemon.host })
      const api = (method: string, path: string, body?: unknown) => call(server.url, method, path, body)
      const task = (name: string, shell: string) =>
        `await runtime.run({ name: ${JSON.stringify(name)}, image: "busybox", command: { path: "sh", args: ["-c", ${JSON.stringify(shell)}] } })`
      const pipeline = (body: string) => ({ content: `export const pipeline = async () => {\n  ${body}\n}\n` })
      expect((await api("PUT", "/api/pipelines/long", pipeline(task("long", "echo started; sleep 120")))).status).toBe(
        201,
      )
      expect((await api("PUT", "/api/pipelines/short", pipeline(task("short", "echo fine")))).status).toBe(201)
    }, 120_000)
    afterAll(() => {
      server.child.kill("SIGKILL")
    })

    for (const signal of ["SIGTERM", "SIGKILL"] as const) {
      it(`ends runs in flight as error naming the daemon when it is stopped with ${signal}, and the next runs succeed`, async () => {
        const api = (method: string, path: string) => call(server.url, method, path)
        const ids: string[] = []
        for (let i = 0; i < 2; i++) ids.push((await api("POST", "/api/pipelines/long/trigger")).body.run_id)
        // Both tasks' containers run on the private daemon.
        await eventually(
          () => daemon.docker("ps", "-q"),
          (text) => text.trim().split("\n").filter(Boolean).length === 2,
          "both tasks' containers run",
          60_000,
        )
        await daemon.stop(signal)
        const ended = await Promise.all(
          ids.map(
            async (id) =>
              (
                await eventually(
                  () => api("GET", `/api/runs/${id}`),
                  (answer) => !["queued", "running"].includes(answer.body.status),
                  `run ${id} ends`,
                  60_000,
                )
              ).body,
          ),
        )
        for (const run of ended) {
          const tasks = (await api("GET", `/api/runs/${run.id}/tasks`)).body
          expect(run.status, JSON.stringify({ run, tasks })).toBe("error")
          expect(run.error_message, JSON.stringify(run)).toContain(`the Docker daemon at ${daemon.host}`)
          if (driver === "docker")
            expect(run.error_message).toContain(`the Docker daemon at ${daemon.host} went away while`)
          // Executed once: a run whose clean-up failed with the daemon is not executed again, its task run twice.
          expect(server.stderr()).not.toContain(`"run.resumed","run":"${run.id}"`)
        }

        // The same runnel process, with no restart: once the daemon is back, runs work again.
        await daemon.start()
        const nextId = (await api("POST", "/api/pipelines/short/trigger")).body.run_id
        const next = (
          await eventually(
            () => api("GET", `/api/runs/${nextId}`),
            (answer) => !["queued", "running"].includes(answer.body.status),
            "the run after the restart ends",
            60_000,
          )
        ).body
        expect(next.status, JSON.stringify(next)).toBe("success")
        const tasks = (await api("GET", `/api/runs/${next.id}/tasks`)).body
        expect(tasks.map((t: { status: string }) => t.status)).toEqual(["success"])
      }, 180_000)
    }
  })
})
