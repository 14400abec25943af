import { execFile, execFileSync, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { existsSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { promisify } from "node:util"
import { describe, it } from "vitest"

const run = promisify(execFile)
const onCi = process.env.CI === "true"

/** Why a private daemon cannot be started here, or undefined when it can: it needs root and dockerd. */
export const privateDockerdMissing: string | undefined =
  process.getuid?.() !== 0
    ? "a private dockerd needs root"
    : !["/usr/sbin/dockerd", "/usr/bin/dockerd"].some(existsSync)
      ? "dockerd is not installed (apt-get install docker.io)"
      : undefined

let warned = false

/**
 * A describe block for tests that break a Docker daemon of their own. Like
 * describeDocker: skipped with a warning where no dockerd can be started,
 * except on CI (CI=true), where they run and fail.
 */
export function describePrivateDockerd(name: string, body: () => void): void {
  if (privateDockerdMissing === undefined) describe(name, body)
  else if (onCi) {
    describe(name, () => {
      it("can start a private dockerd (CI=true requires one)", () => {
        throw new Error(`${privateDockerdMissing}; CI runs as root with docker.io installed`)
      })
      body()
    })
  } else {
    if (!warned) console.warn(`private dockerd tests skipped: ${privateDockerdMissing}`)
    warned = true
    describe.skip(name, body)
  }
}

/**
 * A dockerd of a test's own (own socket, data-root, exec-root, pidfile and bridge;
 * no iptables), so that the test may stop and kill it: the shared
 * daemon other tests use is never touched. busybox is loaded into it from the
 * shared daemon.
 */
export type PrivateDockerd = {
  /** `unix:///…/docker.sock`, for DOCKER_HOST. */
  readonly host: string
  /** Starts the daemon (again, on the same data-root) and waits until it answers. */
  start(): Promise<void>
  /** Stops it with `signal` and waits until its process is gone. */
  stop(signal: "SIGTERM" | "SIGKILL"): Promise<void>
  /** `docker -H host ARGS…`'s stdout. */
  docker(...args: string[]): Promise<string>
  /** Stops the daemon and its containers, unmounts and removes its directories. */
  close(): Promise<void>
}

export async function privateDockerd(): Promise<PrivateDockerd> {
  const dir = mkdtempSync(join(tmpdir(), "runnel-dockerd-"))
  const socket = join(dir, "docker.sock")
  const host = `unix://${socket}`
  const pidfile = join(dir, "docker.pid")
  const dataRoot = join(dir, "data")
  const logFile = join(dir, "dockerd.log")
  // A bridge of its own (interface names have at most 15 characters), in a /24 of 10.213/16 unlikely to be in use.
  const suffix = randomBytes(4).toString("hex")
  const bridge = `rnl${suffix}`
  execFileSync("ip", ["link", "add", "name", bridge, "type", "bridge"])
  execFileSync("ip", ["addr", "add", `10.213.${randomBytes(1)[0]}.1/24`, "dev", bridge])
  execFileSync("ip", ["link", "set", bridge, "up"])
  let pid: number | undefined
  const docker = async (...args: string[]) => (await run("docker", ["-H", host, ...args], { timeout: 60_000 })).stdout
  const gone = (id: number) => {
    try {
      process.kill(id, 0)
      return false
    } catch {
      return true
    }
  }
  const daemon: PrivateDockerd = {
    host,
    docker,
    async start() {
      const deadline = Date.now() + 30_000
      const spawnDaemon = () => {
        // A killed daemon leaves its pidfile, and a new one refuses to start beside it.
        rmSync(pidfile, { force: true })
        const child = spawn(
          "dockerd",
          [
            "--host",
            host,
            "--data-root",
            dataRoot,
            "--exec-root",
            join(dir, "exec"),
            "--pidfile",
            pidfile,
            // Never --bridge=none: a daemon started so deletes the host's docker0, the shared daemon's bridge.
            "--bridge",
            bridge,
            "--iptables=false",
            "--ip6tables=false",
          ],
          { stdio: ["ignore", openSync(logFile, "a"), openSync(logFile, "a")], detached: true },
        )
        child.unref()
        pid = child.pid
      }
      spawnDaemon()
      for (;;) {
        try {
          await run("docker", ["-H", host, "version"], { timeout: 5_000 })
          return
        } catch (error) {
          if (Date.now() > deadline) {
            const log = readFileSync(logFile, "utf8").split("\n").slice(-10).join("\n")
            throw new Error(`the private dockerd at ${host} did not answer: ${String(error)}; its log ends:\n${log}`)
          }
          // Just after a SIGKILL the old daemon's containerd may still hold its socket, and the new daemon gives up.
          if (pid !== undefined && gone(pid)) spawnDaemon()
          await new Promise((resolve) => setTimeout(resolve, 200))
        }
      }
    },
    async stop(signal) {
      if (pid === undefined) return
      const id = pid
      pid = undefined
      process.kill(id, signal)
      while (!gone(id)) await new Promise((resolve) => setTimeout(resolve, 100))
    },
    async close() {
      if (pid !== undefined) {
        await docker("rm", "-f", ...(await docker("ps", "-aq")).split("\n").filter((id) => id !== "")).catch(() => "")
        await daemon.stop("SIGTERM")
      }
      // Containers of a killed daemon that was not started again keep their shims, which hold mounts under `dir`.
      for (const entry of readdirSync("/proc").filter((name) => /^\d+$/.test(name))) {
        try {
          if (readFileSync(`/proc/${entry}/cmdline`, "utf8").includes(dir)) process.kill(Number(entry), "SIGKILL")
        } catch {
          // The process ended meanwhile.
        }
      }
      // dockerd mounts its data-root (and overlays under it); a killed one leaves them mounted.
      const mounts = readFileSync("/proc/mounts", "utf8")
        .split("\n")
        .map((line) => line.split(" ")[1] ?? "")
        .filter((path) => path.startsWith(dir))
        .sort((a, b) => b.length - a.length)
      for (const path of mounts) execFileSync("umount", ["-l", path])
      rmSync(dir, { recursive: true, force: true })
      execFileSync("ip", ["link", "delete", bridge])
    },
  }
  try {
    await daemon.start()
    // No registry is reachable: the image comes from the shared daemon.
    execFileSync("sh", ["-c", `docker save busybox | docker -H ${host} load`], { stdio: "ignore", timeout: 60_000 })
  } catch (error) {
    await daemon.close()
    throw error
  }
  return daemon
}
