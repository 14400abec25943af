import { readdirSync, readFileSync } from "node:fs"
import { join, relative } from "node:path"
import { describe, expect, it } from "vitest"
import { parse, parseAllDocuments } from "yaml"
import { authFlags } from "../lib/config/auth.ts"
import { envName } from "../lib/config/flags.ts"
import { serverFlags } from "../lib/config/server.ts"
import packageJson from "../package.json" with { type: "json" }
import { root } from "./cli.ts"

// What can be checked of charts/runnel without helm (not installed on these machines): the plain YAML parses,
// its crds/ are the repository's, every .Values path a template reads is in values.yaml, every flag and CI_*
// variable the Deployment passes is one `runnel server` accepts, and the Role grants every call the code makes.
// The templates are read by a small reader of `{{ ... }}` actions and `- --flag` lines, not a Go template
// engine: rendering is left to `helm template` (test-e2e/kind.sh runs helm install).
const chart = join(root, "charts", "runnel")
const read = (...path: string[]) => readFileSync(join(...path), "utf8")
const templates = readdirSync(join(chart, "templates"))
const deployment = read(chart, "templates", "deployment.yaml")
const values = parse(read(chart, "values.yaml")) as Record<string, unknown>

/** The value at a dotted path of values.yaml, or undefined when one of its keys is missing. */
function valueAt(path: readonly string[]): unknown {
  let at: unknown = values
  for (const key of path) {
    if (typeof at !== "object" || at === null || !(key in at)) return undefined
    at = (at as Record<string, unknown>)[key]
  }
  return at
}

/** The text of every `{{ ... }}` action of a template. */
const actions = (text: string) => [...text.matchAll(/\{\{-?(.*?)-?\}\}/gs)].map((match) => match[1] ?? "")

const flagNamed = (name: string) => serverFlags.find((flag) => flag.name === name || flag.alias === name)

describe("the Helm chart charts/runnel (static checks)", () => {
  it("has a Chart.yaml whose appVersion is package.json's version, the image's tag by default", () => {
    expect(parse(read(chart, "Chart.yaml"))).toMatchObject({
      apiVersion: "v2",
      name: "runnel",
      appVersion: packageJson.version,
    })
    expect(valueAt(["image"])).toEqual({ repository: "runnel", tag: "", pullPolicy: "IfNotPresent" })
    expect(read(chart, "templates", "_helpers.tpl")).toContain(
      "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}",
    )
  })

  it("holds copies of the repository's CRDs, byte for byte (copy them: cp crds/*.yaml charts/runnel/crds/)", () => {
    const yamlFiles = (dir: string) =>
      readdirSync(dir)
        .filter((name) => name.endsWith(".yaml"))
        .sort()
    const crds = join(root, "crds")
    expect(yamlFiles(join(chart, "crds"))).toEqual(yamlFiles(crds))
    for (const file of yamlFiles(crds)) {
      expect(read(chart, "crds", file), file).toBe(read(crds, file))
      for (const doc of parseAllDocuments(read(chart, "crds", file))) expect(doc.errors, file).toEqual([])
    }
  })

  it("reads only values that values.yaml defines, in balanced template actions", () => {
    expect(templates).toEqual(
      expect.arrayContaining(["deployment.yaml", "service.yaml", "serviceaccount.yaml", "rbac.yaml", "pvc.yaml"]),
    )
    let references = 0
    for (const file of templates) {
      const text = read(chart, "templates", file)
      expect(text.split("{{").length, `${file}: {{ and }} pair up`).toBe(text.split("}}").length)
      for (const action of actions(text)) {
        for (const match of action.matchAll(/\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)/g)) {
          const path = (match[1] ?? "").slice(1).split(".")
          expect(valueAt(path), `${file} reads .Values.${path.join(".")}`).not.toBeUndefined()
          references++
        }
      }
    }
    expect(references).toBeGreaterThan(20)
  })

  it("passes runnel server only flags it accepts", () => {
    const args = [...deployment.matchAll(/^\s+- (--[a-z0-9-]+)(?:=|$)/gm)].map((match) => match[1] ?? "")
    expect(args).toEqual(
      expect.arrayContaining([
        "--host",
        "--driver",
        "--allowed-features",
        "--schedules-mode",
        "--task-volume-size",
        "--allow-privileged-tasks",
      ]),
    )
    for (const arg of args) expect(flagNamed(arg.slice(2)), `runnel server accepts ${arg}`).toBeDefined()
    expect(deployment).toMatch(/args:\n\s+- server\n/)
  })

  it("passes --allow-privileged-tasks only when server.allowPrivilegedTasks is set, off by default", () => {
    expect(valueAt(["server", "allowPrivilegedTasks"])).toBe(false)
    expect(deployment).toMatch(
      /\{\{- if \.Values\.server\.allowPrivilegedTasks \}\}\n\s+- --allow-privileged-tasks\n\s+\{\{- end \}\}\n/,
    )
  })

  it("sets only CI_* variables of runnel server's flags: every authentication flag, from the existing Secret", () => {
    const literal = [...deployment.matchAll(/name: (CI_[A-Z0-9_]+)/g)].map((match) => match[1])
    const known = new Set(serverFlags.map(envName))
    for (const name of literal) expect(known.has(name ?? ""), `${name} is a flag's variable`).toBe(true)
    // The authentication block: one optional key of auth.existingSecret per flag, named as the flag, set as the
    // flag's variable (envName: CI_ and the name upper-cased, dashes as underscores).
    const block = /\{\{- with \.Values\.auth\.existingSecret \}\}(.*?)\{\{- end \}\}\n\s+\{\{- end \}\}/s.exec(
      deployment,
    )
    const keys = [...(/range list ((?:"[a-z0-9-]+" ?)+)/.exec(block?.[1] ?? "")?.[1] ?? "").matchAll(/"([a-z0-9-]+)"/g)]
    expect(keys.map((match) => match[1])).toEqual(authFlags.map((flag) => flag.name))
    expect(block?.[1]).toContain('- name: CI_{{ . | upper | replace "-" "_" }}')
    expect(block?.[1]).toMatch(/name: \{\{ \$secret \}\}\n\s+key: \{\{ \. \}\}\n\s+optional: true/)
    for (const flag of authFlags) expect(known.has(envName(flag))).toBe(true)
  })

  it("serves Prometheus metrics on a port named metrics, annotated for scrapers, when metrics.enabled", () => {
    expect(valueAt(["metrics"])).toEqual({ enabled: true, port: 9090 })
    const service = read(chart, "templates", "service.yaml")
    const metricsBlock = /\{\{- if \.Values\.metrics\.enabled \}\}(.*?)\{\{- end \}\}/gs
    const blocks = (text: string) => [...text.matchAll(metricsBlock)].map((match) => match[1] ?? "")
    const inDeployment = blocks(deployment).join("\n")
    expect(inDeployment).toContain("- --metrics-port={{ .Values.metrics.port }}")
    expect(inDeployment).toMatch(/- name: metrics\n\s+containerPort: \{\{ \.Values\.metrics\.port \}\}/)
    const inService = blocks(service).join("\n")
    expect(inService).toMatch(/- name: metrics\n\s+port: \{\{ \.Values\.metrics\.port \}\}\n\s+targetPort: metrics/)
    for (const block of [inDeployment, inService]) {
      expect(block).toContain('prometheus.io/scrape: "true"')
      expect(block).toContain("prometheus.io/port: {{ .Values.metrics.port | quote }}")
      expect(block).toContain("prometheus.io/path: /metrics")
    }
  })

  it("runs the image's numeric user, who owns the volume (fsGroup), without privilege escalation", () => {
    const user = /^USER (\d+):(\d+)$/m.exec(read(root, "image", "Dockerfile"))
    expect(user?.slice(1)).toEqual(["65532", "65532"])
    expect(deployment).toContain(
      `runAsNonRoot: true\n        runAsUser: ${user?.[1]}\n        runAsGroup: ${user?.[2]}\n        fsGroup: ${user?.[2]}\n`,
    )
    expect(deployment).toMatch(/allowPrivilegeEscalation: false\n\s+capabilities:\n\s+drop: \["ALL"\]/)
  })

  it("runs tasks as Pods by default, with its stores on the volume", () => {
    expect(valueAt(["server", "driver"])).toBe("kubernetes")
    expect(deployment).toContain("--storage-sqlite-path=/data/runnel.db")
    expect(deployment).toContain("mountPath: /data")
  })

  it("grants the Role every verb runnel server's code uses on each resource", () => {
    const granted = grantedVerbs(read(chart, "templates", "rbac.yaml"))
    const used = usedVerbs()
    expect(used.get("runnel.dev/runs")).toEqual(expect.arrayContaining(["list", "watch", "create"]))
    for (const [resource, verbs] of used) {
      for (const verb of verbs) expect(granted.get(resource), `${verb} ${resource}`).toContain(verb)
    }
  })
})

/** The first Role of rbac.yaml (the server's) as `group/resource` to verbs. */
function grantedVerbs(rbac: string): Map<string, string[]> {
  const role = rbac.split(/^---$/m)[0] ?? ""
  const granted = new Map<string, string[]>()
  for (const rule of role.matchAll(/apiGroups: \[(.*?)\]\n\s+resources: \[(.*?)\]\n\s+verbs: \[(.*?)\]/g)) {
    const list = (text: string | undefined) => [...(text ?? "").matchAll(/"([^"]*)"/g)].map((match) => match[1] ?? "")
    for (const group of list(rule[1])) {
      for (const resource of list(rule[2])) granted.set(`${group}/${resource}`, list(rule[3]))
    }
  }
  return granted
}

const runnelPlurals = ["pipelines", "runs", "schedules", "gates"]
const verbOf: Record<string, string> = {
  list: "list",
  read: "get",
  get: "get",
  create: "create",
  replace: "update",
  patch: "patch",
  delete: "delete",
  deleteCollection: "deletecollection",
}
const resourceOf: Record<string, readonly string[]> = {
  CustomObject: runnelPlurals.map((plural) => `runnel.dev/${plural}`),
  CustomObjectStatus: runnelPlurals.map((plural) => `runnel.dev/${plural}/status`),
  Secret: ["/secrets"],
  Pod: ["/pods"],
  PersistentVolumeClaim: ["/persistentvolumeclaims"],
  CronJob: ["batch/cronjobs"],
}

/**
 * What the production code (not the embedded API, which serves these calls) asks a Kubernetes API for, read
 * from its client-node calls: `<verb>Namespaced<Kind>(` methods; makeInformer (the operator's informers of
 * runnel's resources: list and watch); startInformer on secretsPath() (the API server's index of webhook
 * Secrets: watch); raw paths `/api/v1/namespaces/${…}/<resource>` watched with `new Watch(`
 * and `…/<resource>/${…}/<subresource>` requested (get).
 */
function usedVerbs(): Map<string, string[]> {
  const used = new Map<string, string[]>()
  const add = (resource: string, verb: string) =>
    used.set(resource, [...new Set([...(used.get(resource) ?? []), verb])])
  for (const file of productionFiles()) {
    const text = readFileSync(file, "utf8")
    for (const match of text.matchAll(
      /\.(list|read|get|create|replace|patch|delete|deleteCollection)Namespaced(CustomObjectStatus|CustomObject|Secret|Pod|PersistentVolumeClaim|CronJob)\(/g,
    )) {
      for (const resource of resourceOf[match[2] ?? ""] ?? []) add(resource, verbOf[match[1] ?? ""] ?? "")
    }
    if (/\bmakeInformer</.test(text)) {
      for (const plural of runnelPlurals) for (const verb of ["list", "watch"]) add(`runnel.dev/${plural}`, verb)
    }
    if (/\bstartInformer</.test(text) && /\bsecretsPath\(\)/.test(text)) add("/secrets", "watch")
    for (const match of text.matchAll(/\/api\/v1\/namespaces\/\$\{[^}]+\}\/([a-z]+)(?:\/\$\{[^}]+\}\/([a-z]+))?/g)) {
      if (match[2] !== undefined) add(`/${match[1]}/${match[2]}`, "get")
      else if (/new Watch\(/.test(text)) add(`/${match[1]}`, "watch")
    }
  }
  return used
}

function productionFiles(): string[] {
  const files: string[] = []
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name)
      if (entry.isDirectory()) walk(path)
      else if (/(?<!\.test|\.fixture)\.ts$/.test(entry.name)) files.push(path)
    }
  }
  for (const dir of ["cli", "lib", "operator", "apiserver"]) walk(join(root, dir))
  expect(files.map((file) => relative(root, file))).toContain("lib/kube/resource-client.ts")
  return files
}
