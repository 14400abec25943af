import { execFileSync } from "node:child_process"
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { describe, expect, it } from "vitest"
import { parse, parseAllDocuments } from "yaml"
import { crdsDir, root, runnelBin } from "./cluster.ts"

// What can be checked of charts/runnel without helm (not installed on these machines): the plain YAML parses,
// the chart's crds/ are the repository's, and every .Values path a template names is in values.yaml.
// Rendering the templates is left to `helm lint` / `helm template` (test-e2e/kind.sh runs helm install).
const chart = join(root, "charts", "runnel")
const read = (...path: string[]) => readFileSync(join(...path), "utf8")

describe("the Helm chart charts/runnel (static checks; no cluster needed)", () => {
  it("has a Chart.yaml and values.yaml that parse", () => {
    expect(parse(read(chart, "Chart.yaml"))).toMatchObject({ apiVersion: "v2", name: "runnel" })
    expect(parse(read(chart, "values.yaml"))).toMatchObject({ service: { port: 8080 } })
  })

  it("holds copies of the repository's CRDs, byte for byte (copy them: cp crds/*.yaml charts/runnel/crds/)", () => {
    const yamlFiles = (dir: string) =>
      readdirSync(dir)
        .filter((name) => name.endsWith(".yaml"))
        .sort()
    expect(yamlFiles(join(chart, "crds"))).toEqual(yamlFiles(crdsDir))
    for (const file of yamlFiles(crdsDir)) {
      expect(read(chart, "crds", file), file).toBe(read(crdsDir, file))
      for (const doc of parseAllDocuments(read(chart, "crds", file))) expect(doc.errors, file).toEqual([])
    }
  })

  it("names only values that values.yaml defines, with balanced template actions", () => {
    const values = parse(read(chart, "values.yaml")) as Record<string, unknown>
    const defined = (path: string[]) => {
      let at: unknown = values
      for (const key of path) {
        if (typeof at !== "object" || at === null || !(key in at)) return false
        at = (at as Record<string, unknown>)[key]
      }
      return true
    }
    const templates = readdirSync(join(chart, "templates"))
    expect(templates).toEqual(
      expect.arrayContaining(["deployment.yaml", "service.yaml", "serviceaccount.yaml", "rbac.yaml", "pvc.yaml"]),
    )
    for (const file of templates) {
      const text = read(chart, "templates", file)
      expect(text.split("{{").length, `${file}: {{ and }} pair up`).toBe(text.split("}}").length)
      for (const match of text.matchAll(/\.Values((?:\.[A-Za-z][A-Za-z0-9]*)+)/g)) {
        const path = (match[1] ?? "").slice(1).split(".")
        expect(defined(path), `${file} names .Values.${path.join(".")}`).toBe(true)
      }
    }
  })

  it("passes runnel server only flags it accepts", () => {
    const help = execFileSync(runnelBin, ["server", "--help"], { encoding: "utf8" })
    const passed = [...read(chart, "templates", "deployment.yaml").matchAll(/^\s+- (--[a-z-]+)/gm)].map((m) => m[1])
    expect(passed.length).toBeGreaterThan(5)
    for (const flag of passed) expect(help, `runnel server --help names ${flag}`).toMatch(new RegExp(`${flag}\\b`))
  })

  it("runs tasks as Pods by default, with the rights the kubernetes driver uses", () => {
    expect((parse(read(chart, "values.yaml")) as { server: { driver: string } }).server.driver).toBe("kubernetes")
    const rules = read(chart, "templates", "rbac.yaml")
    expect(rules).toMatch(/resources: \["pods"\]\n\s+verbs: \["get", "list", "watch", "create", "delete"\]/)
    expect(rules).toMatch(/resources: \["pods\/log"\]\n\s+verbs: \["get"\]/)
    expect(rules).toMatch(/resources: \["persistentvolumeclaims"\]\n\s+verbs: \[[^\]]*"deletecollection"/)
  })

  it("runs runnel server on port 8080 with its stores on the volume", () => {
    const deployment = read(chart, "templates", "deployment.yaml")
    expect(deployment).toContain("- server")
    expect(deployment).toContain("--storage-sqlite-path=/data/runnel.db")
    expect(deployment).toContain("mountPath: /data")
  })
})
