import { execFile, execFileSync, spawn } from "node:child_process"
import { writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { RunningApi } from "./embedded-api.fixture.ts"
import { startEmbeddedApi } from "./embedded-api.fixture.ts"

// The machine's kubectl (or Debian's kubernetes-client). Without one this suite cannot say anything, so it is skipped, loudly.
const kubectlVersion = (() => {
  try {
    return execFileSync("kubectl", ["version", "--client", "-o", "json"], { encoding: "utf8" })
  } catch {
    console.warn("kubectl is not installed: the kubectl suite of the embedded API is skipped")
    return undefined
  }
})()

let running: RunningApi
let env: NodeJS.ProcessEnv

beforeAll(async () => {
  running = await startEmbeddedApi()
  const kubeconfig = join(running.dir, "kubeconfig")
  writeFileSync(kubeconfig, "")
  env = { ...process.env, KUBECONFIG: kubeconfig, HOME: running.dir }
})
afterAll(() => running?.close())

type Result = { code: number; stdout: string; stderr: string }

function kubectl(...args: string[]): Promise<Result> {
  const all = ["--server", running.server, "--cache-dir", join(running.dir, "cache"), ...args]
  return new Promise((resolve) => {
    execFile("kubectl", all, { env, timeout: 20_000 }, (error, stdout, stderr) => {
      resolve({ code: error === null ? 0 : typeof error.code === "number" ? error.code : 1, stdout, stderr })
    })
  })
}

function file(name: string, text: string) {
  const path = join(running.dir, name)
  writeFileSync(path, text)
  return path
}

const manifest = (content: string, extra = "") => `apiVersion: runnel.dev/v1alpha1
kind: Pipeline
metadata:
  name: demo
  labels:
    app: demo
spec:
  content: ${JSON.stringify(content)}
${extra}`

describe.skipIf(kubectlVersion === undefined)(
  `kubectl ${JSON.parse(kubectlVersion ?? "{}").clientVersion?.gitVersion ?? ""}`,
  () => {
    it("applies a Pipeline from a file, re-applies a change, and gets it as JSON", async () => {
      const first = await kubectl("apply", "-f", file("demo.yaml", manifest("export async function pipeline() {}")))
      expect(first).toMatchObject({ code: 0, stdout: "pipeline.runnel.dev/demo created\n" })
      const again = await kubectl("apply", "-f", file("demo.yaml", manifest("export async function pipeline() {}")))
      expect(again.stdout).toBe("pipeline.runnel.dev/demo unchanged\n")
      const changed = await kubectl(
        "apply",
        "-f",
        file("demo.yaml", manifest("export async function pipeline() { return }")),
      )
      expect(changed.stdout).toBe("pipeline.runnel.dev/demo configured\n")

      const got = await kubectl("get", "pipelines.runnel.dev", "demo", "-o", "json")
      const object = JSON.parse(got.stdout)
      expect(object.spec).toEqual({ content: "export async function pipeline() { return }", paused: false })
      expect(object.metadata).toMatchObject({
        name: "demo",
        namespace: "default",
        generation: 2,
        labels: { app: "demo" },
      })
    })

    it("shows the printer columns and finds kinds by short name and category", async () => {
      const table = await kubectl("get", "rpl")
      expect(table.stdout.split("\n")[0]?.split(/\s+/)).toEqual(["NAME", "READY", "PAUSED", "AGE"])
      expect(table.stdout).toMatch(/^demo\s+false\s+\d+s$/m)
      const byCategory = await kubectl("get", "runnel", "-o", "name")
      expect(byCategory.stdout).toBe("pipeline.runnel.dev/demo\n")
    })

    it("reports an unknown field and a schema violation as kubectl users know them", async () => {
      const unknown = await kubectl(
        "apply",
        "-f",
        file("unknown.yaml", manifest("x", "  colour: red\n").replace("demo\n  labels", "odd\n  labels")),
      )
      expect(unknown.code).not.toBe(0)
      expect(unknown.stderr).toContain('strict decoding error: unknown field "spec.colour"')

      const wrong = await kubectl(
        "apply",
        "-f",
        file("wrong.yaml", manifest("x", "  contentType: cobol\n").replace("demo\n  labels", "wrong\n  labels")),
      )
      expect(wrong.code).not.toBe(0)
      expect(wrong.stderr).toContain('The Pipeline "wrong" is invalid')
      expect(wrong.stderr).toContain('spec.contentType: Unsupported value: "cobol"')
    })

    it("patches with --type merge and --type json, and the status subresource", async () => {
      expect(
        (await kubectl("patch", "pipeline.runnel.dev", "demo", "--type", "merge", "-p", '{"spec":{"paused":true}}'))
          .code,
      ).toBe(0)
      const json = await kubectl(
        "patch",
        "rpl",
        "demo",
        "--type",
        "json",
        "-p",
        '[{"op":"add","path":"/metadata/labels/tier","value":"one"}]',
      )
      expect(json.code).toBe(0)
      const status = await kubectl(
        "patch",
        "rpl",
        "demo",
        "--subresource",
        "status",
        "--type",
        "merge",
        "-p",
        '{"status":{"conditions":[{"type":"Ready","status":"True"}]}}',
      )
      expect(status.code).toBe(0)
      const object = JSON.parse((await kubectl("get", "rpl", "demo", "-o", "json")).stdout)
      expect(object.spec.paused).toBe(true)
      expect(object.metadata.labels).toEqual({ app: "demo", tier: "one" })
      expect(object.status.conditions).toEqual([{ type: "Ready", status: "True" }])
      expect((await kubectl("get", "rpl", "-l", "tier=one")).stdout).toMatch(/^demo\s+True\s+true\s+\d+s$/m)
    })

    it("creates a namespace and a Secret, which kubectl sends as protobuf", async () => {
      expect((await kubectl("create", "namespace", "team-a")).stdout).toBe("namespace/team-a created\n")
      const created = await kubectl(
        "-n",
        "team-a",
        "create",
        "secret",
        "generic",
        "hook",
        "--from-literal=webhookSecret=s3cret",
      )
      expect(created).toMatchObject({ code: 0, stdout: "secret/hook created\n" })
      const secret = JSON.parse((await kubectl("-n", "team-a", "get", "secret", "hook", "-o", "json")).stdout)
      expect(secret.data).toEqual({ webhookSecret: Buffer.from("s3cret").toString("base64") })
      expect(secret.metadata.generateName).toBeUndefined()
      expect((await kubectl("-n", "team-a", "get", "secrets")).stdout).toMatch(/^hook\s+Opaque\s+1\s+\d+s$/m)
      expect((await kubectl("delete", "namespace", "team-a")).code).toBe(0)
      await running.api.settled()
      expect((await kubectl("get", "namespace", "team-a")).stderr).toContain('namespaces "team-a" not found')
    })

    it("watches changes until the request timeout, then deletes", async () => {
      const args = ["--server", running.server, "--cache-dir", join(running.dir, "cache")]
      const watcher = spawn(
        "kubectl",
        [
          ...args,
          "get",
          "rpl",
          "--watch",
          "--output-watch-events",
          "-o",
          'jsonpath={.type} {.object.metadata.name}{"\\n"}',
          "--request-timeout=2s",
        ],
        { env },
      )
      let output = ""
      watcher.stdout.on("data", (chunk) => {
        output += chunk
      })
      const exited = new Promise<number | null>((resolve) => watcher.on("close", resolve))
      while (!output.includes("ADDED demo")) await new Promise((resolve) => setTimeout(resolve, 50))
      await kubectl("patch", "rpl", "demo", "--type", "merge", "-p", '{"spec":{"paused":false}}')
      const deleted = await kubectl("delete", "-f", join(running.dir, "demo.yaml"))
      expect(deleted.stdout).toBe('pipeline.runnel.dev "demo" deleted\n')
      expect(await exited).toBe(0)
      expect(output.trim().split("\n")).toEqual(["ADDED demo", "MODIFIED demo", "DELETED demo"])
      const gone = await kubectl("get", "rpl", "demo")
      expect(gone.code).not.toBe(0)
      expect(gone.stderr).toContain('pipelines.runnel.dev "demo" not found')
    })
  },
)
