import { type ChildProcess, execFile, spawn } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { expect } from "vitest"
import { runnelBin } from "./cli.ts"

/** bin/runnel COMMAND in its own process; resolves with its URL once it prints its listening line. */
export type ServerProcess = { url: string; cwd: string; child: ChildProcess; stdout(): string; stderr(): string }

/** Temp directories and processes of one test file: `cleanUp()` in its afterAll. */
export function serverProcesses(prefix: string) {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  const started = new Set<ChildProcess>()
  let count = 0
  return {
    dir,
    /**
     * `bin/runnel server --port 0 --driver native --allowed-drivers *,native` on a temp database, unless `command` or
     * `args` say otherwise; `ready` finds its URL in stdout (the listening line; `runnel operator` has only its metrics line);
     * `env` is added to this process's environment (DOCKER_HOST, say).
     */
    start(
      args: readonly string[] = [],
      command: readonly string[] = ["server"],
      ready = /listening on (https?:\/\/\S+)/,
      env: NodeJS.ProcessEnv = {},
    ): Promise<ServerProcess> {
      const cwd = mkdtempSync(join(dir, `server-${++count}-`))
      const child = spawn(
        runnelBin,
        [
          ...command,
          // `runnel operator` serves no API, so it has no --port.
          ...(command[0] === "operator" ? [] : ["--port", "0"]),
          "--driver",
          "native",
          // Named, so that it stays allowed with authentication on, where `*` leaves it out.
          "--allowed-drivers",
          "*,native",
          "--storage-sqlite-path",
          join(cwd, "runnel.db"),
          ...args,
        ],
        { cwd, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } },
      )
      started.add(child)
      let stdout = ""
      let stderr = ""
      child.stderr?.setEncoding("utf8").on("data", (text: string) => {
        stderr += text
      })
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no ${ready} line within 20 s; stderr: ${stderr}`)), 20_000)
        child.stdout?.setEncoding("utf8").on("data", (text: string) => {
          stdout += text
          const match = ready.exec(stdout)
          if (match?.[1] !== undefined) {
            clearTimeout(timer)
            resolve({ url: match[1], cwd, child, stdout: () => stdout, stderr: () => stderr })
          }
        })
        child.on("exit", (code) => {
          clearTimeout(timer)
          reject(new Error(`runnel ${command.join(" ")} exited (${code}) before listening: ${stderr}`))
        })
      })
    },
    cleanUp() {
      for (const child of started) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL")
      // A killed server's native tasks lead process groups of their own and may still write here: a
      // directory refilled while it is removed (ENOTEMPTY) is removed again.
      rmSync(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 })
    },
  }
}

/** The line `--metrics-port` prints: its capture is the metrics server's base URL. */
export const metricsLine = /metrics on (http:\/\/\S+)\/metrics/

/** The base URL of a server's metrics port, from the line it printed. */
export function metricsOf(server: ServerProcess): string {
  const url = metricsLine.exec(server.stdout())?.[1]
  if (url === undefined) throw new Error(`no metrics line in ${server.stdout()}`)
  return url
}

// biome-ignore lint/suspicious/noExplicitAny: the tests read JSON answers field by field and compare them with expect.
export type Answer = { status: number; body: any; type: string | null }

/** A JSON call; `raw` sends that text as the body instead, for malformed requests. */
export async function call(base: string, method: string, path: string, body?: unknown, raw?: string): Promise<Answer> {
  const response = await fetch(`${base}${path}`, {
    method,
    headers: body === undefined && raw === undefined ? {} : { "Content-Type": "application/json" },
    body: raw ?? (body === undefined ? undefined : JSON.stringify(body)),
  })
  const text = await response.text()
  return {
    status: response.status,
    body: text === "" ? undefined : JSON.parse(text),
    type: response.headers.get("content-type"),
  }
}

export async function eventually<T>(
  read: () => Promise<T>,
  holds: (value: T) => boolean,
  what: string,
  timeoutMs = 30_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await read()
    if (holds(value)) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}; last: ${JSON.stringify(value)}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

/** Triggers pipeline `name` and waits until its run ends; the run as GET /api/runs/:id shows it, and its tasks. */
export async function runToEnd(
  base: string,
  name: string,
  timeoutMs = 30_000,
): Promise<{ run: Answer["body"]; tasks: Answer["body"] }> {
  const trigger = await call(base, "POST", `/api/pipelines/${name}/trigger`)
  if (trigger.status !== 202) throw new Error(`trigger answered ${trigger.status}: ${JSON.stringify(trigger.body)}`)
  const run = await eventually(
    () => call(base, "GET", `/api/runs/${trigger.body.run_id}`),
    (answer) => ["success", "failure", "error"].includes(answer.body.status),
    "the run finishes",
    timeoutMs,
  )
  return { run: run.body, tasks: (await call(base, "GET", `/api/runs/${trigger.body.run_id}/tasks`)).body }
}

/** A script pipeline with one native task running `shell`. */
export const script = (shell: string) =>
  `export const pipeline = async () => {\n  await runtime.run({ name: "step", image: "busybox", command: { path: "sh", args: ["-c", ${JSON.stringify(shell)}] } })\n}\n`

/**
 * A YAML pipeline whose run ends in status `error`: its task's ((nope)) is
 * defined nowhere, so runnel cannot run it (no Docker needed: no task starts).
 */
export const erroringYaml = `jobs:
- name: j
  plan:
  - task: use
    config: {platform: linux, image_resource: {type: registry-image, source: {repository: busybox}}, run: {path: "true"}}
    params: {X: ((nope))}
`

/** A bare MCP `tools/call` over plain fetch: no initialize, no session, no Accept or Content-Type header. */
export const bareToolCall = (base: string, name: string, args: Record<string, unknown> = {}, id = 1) =>
  fetch(`${base}/mcp`, {
    method: "POST",
    body: JSON.stringify({ jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: args } }),
  })

// biome-ignore lint/suspicious/noExplicitAny: events and answers are compared field by field.
export type Json = any
export type Event = { id: number | undefined; data: Json }

/** Reads an event stream to its end (or until `stopAfter` events, then leaves); heartbeats are skipped. */
export async function readEvents(response: Response, stopAfter = Number.POSITIVE_INFINITY): Promise<Event[]> {
  expect(response.status).toBe(200)
  expect(response.headers.get("content-type")).toMatch(/^text\/event-stream/)
  const reader = response.body?.pipeThrough(new TextDecoderStream()).getReader()
  if (reader === undefined) throw new Error("no body")
  const events: Event[] = []
  let buffer = ""
  for (;;) {
    const { value, done } = await reader.read()
    if (done) return events
    buffer += value
    for (let end = buffer.indexOf("\n\n"); end >= 0; end = buffer.indexOf("\n\n")) {
      const frame = buffer.slice(0, end)
      buffer = buffer.slice(end + 2)
      let id: number | undefined
      let data: string | undefined
      for (const line of frame.split("\n")) {
        if (line.startsWith("id: ")) id = Number(line.slice(4))
        else if (line.startsWith("data: ")) data = line.slice(6)
      }
      if (data === undefined) continue
      events.push({ id, data: JSON.parse(data) })
      if (events.length >= stopAfter) {
        await reader.cancel()
        return events
      }
    }
  }
}

/** kubectl against a server's embedded API (at /k8s), with no kubeconfig of its own; `input` is its stdin. */
export function kubectl(server: ServerProcess, ...args: string[]): Promise<string> {
  return kubectlWithInput(server, undefined, ...args)
}

export function kubectlWithInput(server: ServerProcess, input: string | undefined, ...args: string[]): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    const child = execFile(
      "kubectl",
      ["--server", `${server.url}/k8s`, "--cache-dir", join(server.cwd, "kube-cache"), ...args],
      { env: { ...process.env, KUBECONFIG: join(server.cwd, "no-kubeconfig") }, timeout: 20_000 },
      (error, stdout, stderr) => (error === null ? resolve(stdout) : reject(new Error(stderr))),
    )
    child.stdin?.end(input ?? "")
  })
}
/** A kubeconfig for the embedded API of the server at `url` (`/k8s`), as kubectl or `runnel operator` reads it. */
export const embeddedKubeconfig = (url: string) => `apiVersion: v1
kind: Config
clusters: [{name: embedded, cluster: {server: "${url}/k8s", insecure-skip-tls-verify: true}}]
users: [{name: anyone, user: {}}]
contexts: [{name: embedded, context: {cluster: embedded, user: anyone, namespace: default}}]
current-context: embedded
`
