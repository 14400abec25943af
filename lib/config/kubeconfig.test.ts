import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { hostEnvironment } from "./flags.ts"
import { type KubeRole, kubeSource } from "./kubeconfig.ts"

const dir = mkdtempSync(join(tmpdir(), "runnel-kubeconfig-test-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const emptyHome = join(dir, "empty-home")
const kubeHome = join(dir, "kube-home")
mkdirSync(join(kubeHome, ".kube"), { recursive: true })
// The policy only looks at which files exist; their content is loaded by cli/kubeconfig.ts.
writeFileSync(join(kubeHome, ".kube", "config"), "")
const one = join(dir, "one.yaml")
const two = join(dir, "two.yaml")
writeFileSync(one, "")
writeFileSync(two, "")

const host = (env: NodeJS.ProcessEnv) => hostEnvironment({ PATH: "/bin", HOME: emptyHome, ...env })
const kinds = (role: KubeRole, flag: string | undefined, env: NodeJS.ProcessEnv) => {
  try {
    const source = kubeSource(role, flag, host(env))
    return source.kind === "files" ? `files ${source.files.join(",")}` : source.kind
  } catch (error) {
    return `error: ${(error as Error).message}`
  }
}

describe("the kubeconfig policy", () => {
  it("takes --kubeconfig first, for every role", () => {
    for (const role of ["server", "operator", "apiserver"] as const) {
      expect(kinds(role, one, { KUBECONFIG: two, KUBERNETES_SERVICE_HOST: "10.0.0.1" })).toBe(`files ${one}`)
    }
  })

  it("lets the split roles take kubectl's choice, $KUBECONFIG then ~/.kube/config, before their Pod's account", () => {
    for (const role of ["operator", "apiserver"] as const) {
      expect(kinds(role, undefined, { KUBECONFIG: `${one}:${two}`, KUBERNETES_SERVICE_HOST: "10.0.0.1" })).toBe(
        `files ${one},${two}`,
      )
      expect(kinds(role, undefined, { HOME: kubeHome })).toBe(`files ${join(kubeHome, ".kube", "config")}`)
      expect(kinds(role, undefined, { KUBERNETES_SERVICE_HOST: "10.0.0.1" })).toBe("in-cluster")
    }
  })

  it("never lets runnel server follow $KUBECONFIG or ~/.kube/config: its Pod's account, else its embedded API", () => {
    expect(kinds("server", undefined, { KUBECONFIG: one, HOME: kubeHome })).toBe("embedded")
    expect(kinds("server", undefined, { KUBECONFIG: one, KUBERNETES_SERVICE_HOST: "10.0.0.1" })).toBe("in-cluster")
  })

  it("tells the split roles what to pass when there is no API to find", () => {
    for (const role of ["operator", "apiserver"] as const) {
      expect(kinds(role, undefined, { KUBECONFIG: "", KUBERNETES_SERVICE_HOST: "" })).toBe(
        `error: runnel ${role} needs a Kubernetes API: pass --kubeconfig FILE (or set KUBECONFIG) outside a cluster, or run it in a Pod; \`runnel server\` serves one of its own`,
      )
    }
  })
})
