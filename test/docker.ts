import { get } from "node:http"
import { describe, it } from "vitest"

/** The daemon Docker tests use, as the composition code would pass it to the docker driver. */
export const dockerHost: string | undefined = process.env.DOCKER_HOST || undefined

const where = dockerHost ?? "/var/run/docker.sock"
const onCi = process.env.CI === "true"

/** Whether a daemon answers `/_ping` within 2 s; asked once per test process. */
export const dockerAnswers: boolean = await ping()

let warned = false

/**
 * A describe block for tests that need a Docker daemon. Without one they are
 * skipped with a warning, except on CI (CI=true), where they run and fail:
 * CI that silently skips them would prove nothing.
 */
export function describeDocker(name: string, body: () => void): void {
  if (dockerAnswers) {
    describe(name, body)
  } else if (onCi) {
    describe(name, () => {
      it("finds a Docker daemon (CI=true requires one)", () => {
        throw new Error(`no Docker daemon answers at ${where}; run .ci/docker-up`)
      })
      body()
    })
  } else {
    if (!warned) console.warn(`Docker tests skipped: no daemon answers at ${where}; start dockerd or run .ci/docker-up`)
    warned = true
    describe.skip(name, body)
  }
}

function ping(): Promise<boolean> {
  const target = where.startsWith("/")
    ? { socketPath: where }
    : where.startsWith("unix://")
      ? { socketPath: where.slice("unix://".length) }
      : (() => {
          const url = new URL(where.replace(/^tcp:/, "http:"))
          return { host: url.hostname, port: url.port || "2375" }
        })()
  return new Promise((resolve) => {
    const request = get({ ...target, path: "/_ping", timeout: 2000, agent: false }, (response) => {
      response.resume()
      resolve(response.statusCode === 200)
    })
    request.on("error", () => resolve(false))
    request.on("timeout", () => {
      request.destroy()
      resolve(false)
    })
  })
}
