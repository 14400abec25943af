import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { loadKubeConfig } from "./kubeconfig.ts"

const dir = mkdtempSync(join(tmpdir(), "runnel-load-kubeconfig-test-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const kubeconfigText = (name: string, server: string) => `apiVersion: v1
kind: Config
clusters: [{ name: ${name}, cluster: { server: "${server}" } }]
users: [{ name: ${name}, user: {} }]
contexts: [{ name: ${name}, context: { cluster: ${name}, user: ${name} } }]
current-context: ${name}
`
const one = join(dir, "one.yaml")
const two = join(dir, "two.yaml")
writeFileSync(one, kubeconfigText("one", "https://one.example:6443"))
writeFileSync(two, kubeconfigText("two", "https://two.example:6443"))

describe("loading the chosen kubeconfig", () => {
  it("merges a KUBECONFIG list as kubectl does, and names the files it cannot load", () => {
    const merged = loadKubeConfig({ kind: "files", files: [one, two], from: "$KUBECONFIG" })
    expect(merged.getClusters().map((cluster) => cluster.name)).toEqual(["one", "two"])
    expect(() =>
      loadKubeConfig({ kind: "files", files: [join(dir, "none.yaml")], from: '--kubeconfig "none.yaml"' }),
    ).toThrow(/^cannot load the kubeconfig --kubeconfig "none\.yaml": /)
  })

  it("reaches the embedded API over plain loopback HTTP with the process's token", () => {
    const embedded = loadKubeConfig({ kind: "embedded" }, { server: "http://127.0.0.1:8080/k8s", token: "t0ken" })
    expect(embedded.getCurrentCluster()).toMatchObject({ server: "http://127.0.0.1:8080/k8s", skipTLSVerify: true })
    expect(embedded.getCurrentUser()).toMatchObject({ token: "t0ken" })
  })
})
