import { dirname, join, normalize } from "node:path"

/**
 * The rules of docs/architecture.md ("Dependency direction") as a function of
 * the source files, so that test/architecture.test.ts can run them on the tree
 * and on small made-up trees that break each rule once.
 *
 * Files are keyed by their path from the repository root. Production code is
 * every file under cli/, kubeserver/, lib/, operator/ and apiserver/ except
 * tests (`*.test.ts`) and test helpers (`*.fixture.ts`, or in a `testing/`
 * folder); test/, test-e2e/ and bench/ are test code and composition roots
 * that may import anything.
 */
export type SourceFiles = ReadonlyMap<string, string>

/** What each lib/ module may import besides itself: every arrow points toward core, and a new module must be added here. */
export const libDependencies: Readonly<Record<string, readonly string[]>> = {
  core: [],
  // Only core's error types (SystemError), so that a bad key file or database is reported as a message, not a crash.
  crypto: ["core"],
  sqlite: ["core"],
  config: ["core"],
  cel: ["core"],
  schedule: ["core"],
  yaml: ["core", "cel", "schedule"],
  script: ["core", "yaml"],
  logs: ["core", "sqlite"],
  secrets: ["core", "crypto", "sqlite"],
  kube: ["core", "script", "secrets"],
  // Running a container on a Docker daemon, one way for the docker driver and the embedded API's Pods; core for SystemError.
  containers: ["core"],
  // The Prometheus series of every role, defined once; core for the status words its labels use.
  metrics: ["core"],
}

/** lib/ modules that know nothing of runnel's domain: the only part of lib/ the embedded API may use. */
const domainFree = ["crypto", "sqlite", "containers"]

/** Packages that are heavy to load or belong to one role, and the only places production code may import them. */
export const packagePlaces: Readonly<Record<string, readonly string[]>> = {
  "isolated-vm": ["operator/engine/sandbox/"],
  dockerode: ["lib/containers/"],
  "isomorphic-git": ["operator/engine/resources/"],
  koa: ["apiserver/"],
  "@koa/router": ["apiserver/"],
  // Through lib/kube/client-node.d.ts alone, whose values are bundled into one module (build/bundle-client-node.ts).
  "@kubernetes/client-node": ["lib/kube/client-node.d.ts"],
  "@aws-sdk/client-s3": ["lib/secrets/"],
  esbuild: ["lib/script/", "apiserver/ui/"],
  commander: ["cli/"],
  "@marcbachmann/cel-js": ["lib/cel/"],
  "@modelcontextprotocol/sdk": ["apiserver/mcp/"],
  zod: ["apiserver/mcp/"],
  "prom-client": ["lib/metrics/"],
  vitest: [],
}

/** Where the program starts: every production file must be reachable from here. */
const entryPoints = ["cli/main.ts"]

const productionRoots = ["cli/", "kubeserver/", "lib/", "operator/", "apiserver/"]

export const isTestCode = (path: string) =>
  path.startsWith("test/") ||
  path.startsWith("test-e2e/") ||
  path.startsWith("bench/") ||
  path.endsWith(".test.ts") ||
  path.endsWith(".fixture.ts") ||
  path.includes("/testing/")

const isProduction = (path: string) => productionRoots.some((root) => path.startsWith(root)) && !isTestCode(path)

/** A concrete implementation behind a port: only the composition code in cli/ names one. */
function concreteHome(path: string): string | undefined {
  if (path.startsWith("kubeserver/")) return "kubeserver/"
  const driver = /^operator\/drivers\/[^/]+\//.exec(path)
  if (driver !== null) return driver[0]
  const backend = /^(lib\/[^/]+\/)(sqlite|s3|kubernetes)-[^/]*$/.exec(path)
  if (backend !== null) return path
  return undefined
}

type Reference = { specifier: string; kind: "static" | "dynamic" | "url" }

/** Every module a file names: static and type imports, re-exports, side-effect imports, import() and `new URL(…, import.meta.url)`. */
export function references(text: string): { found: Reference[]; unreadable: string[] } {
  const code = text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/(^|[^:"'`])\/\/.*$/gm, "$1")
  const found: Reference[] = []
  for (const m of code.matchAll(/(?:^|[\n;])\s*(?:import|export)\b[^"'`;]*?\bfrom\s*["']([^"']+)["']/g)) {
    found.push({ specifier: m[1] as string, kind: "static" })
  }
  for (const m of code.matchAll(/(?:^|[\n;])\s*import\s*["']([^"']+)["']/g)) {
    found.push({ specifier: m[1] as string, kind: "static" })
  }
  const unreadable: string[] = []
  for (const m of code.matchAll(/\bimport\s*\(\s*([^)]*)\)/g)) {
    const argument = (m[1] as string).trim()
    if (argument === "") continue // inside a message; import() itself does not parse
    const literal = /^["']([^"']+)["']$/.exec(argument)
    if (literal !== null) found.push({ specifier: literal[1] as string, kind: "dynamic" })
    else unreadable.push(argument)
  }
  for (const m of code.matchAll(/new URL\(\s*["']([^"']+)["']\s*,\s*import\.meta\.url\s*\)/g)) {
    found.push({ specifier: m[1] as string, kind: "url" })
  }
  return { found, unreadable }
}

const packageName = (specifier: string) =>
  specifier.startsWith("@") ? specifier.split("/").slice(0, 2).join("/") : (specifier.split("/")[0] as string)

/** The Kubernetes client, which the kubernetes driver uses as the operator does. */
const kubernetesClient = "lib/kube/client-node.d.ts"

/**
 * A generated module stands for its declarations: `x.js` with an `x.d.ts` beside it (lib/kube/client-node.js,
 * made at install from the package its declarations name) is checked, and reached, as `x.d.ts`.
 */
const declared = (files: SourceFiles, path: string) => {
  const declarations = path.replace(/\.js$/, ".d.ts")
  return path.endsWith(".js") && files.has(declarations) ? declarations : path
}

/** The rule an import from one production file to another breaks, if any. */
function directionProblem(from: string, to: string): string | undefined {
  if (from.startsWith("cli/")) return undefined
  const area = from.split("/")[0]
  if (from.startsWith("kubeserver/")) {
    const ok = to.startsWith("kubeserver/") || domainFree.some((name) => to.startsWith(`lib/${name}/`))
    return ok ? undefined : `the embedded API imports only kubeserver/ and lib/{${domainFree.join(",")}}`
  }
  if (from.startsWith("lib/")) {
    const own = from.split("/")[1] as string
    const allowed = libDependencies[own]
    if (allowed === undefined) return `lib/${own} is not in the lib/ dependency table of test/module-map.ts`
    if (!to.startsWith("lib/")) return "lib/ imports only lib/"
    const target = to.split("/")[1] as string
    return target === own || allowed.includes(target)
      ? undefined
      : `lib/${own} may import lib/{${allowed.join(",")}}, not lib/${target}`
  }
  const driver = /^operator\/drivers\/[^/]+\//.exec(from)
  if (driver !== null) {
    const ok =
      to.startsWith(driver[0]) ||
      to === "operator/drivers/driver.ts" ||
      to.startsWith("lib/core/") ||
      to.startsWith("lib/containers/") ||
      to === kubernetesClient
    return ok
      ? undefined
      : "a driver imports only its own folder, the driver contract, lib/core, lib/containers and the Kubernetes client"
  }
  if (area === "operator")
    return to.startsWith("operator/") || to.startsWith("lib/") ? undefined : "operator/ imports only operator/ and lib/"
  if (area === "apiserver") {
    return to.startsWith("apiserver/") || to.startsWith("lib/")
      ? undefined
      : "apiserver/ imports only apiserver/ and lib/"
  }
  return undefined
}

/** Every broken rule, as `rule: detail`; empty when the tree follows the map. */
export function checkModuleMap(files: SourceFiles): string[] {
  const problems: string[] = []
  const edges = new Map<string, string[]>()
  for (const [from, text] of files) {
    if (!isProduction(from) || declared(files, from) !== from) continue
    const { found, unreadable } = references(text)
    for (const argument of unreadable) problems.push(`dynamic-import: ${from} imports a computed name (${argument})`)
    const targets: string[] = []
    for (const { specifier, kind } of found) {
      if (!specifier.startsWith(".")) {
        if (kind === "url") continue
        const name = packageName(specifier)
        const places = packagePlaces[name]
        if (places !== undefined && !places.some((place) => from.startsWith(place))) {
          problems.push(
            `package: ${from} imports ${name}, which belongs only in ${places.length === 0 ? "tests" : places.join(", ")}`,
          )
        }
        continue
      }
      const to = declared(files, normalize(join(dirname(from), specifier)))
      targets.push(to)
      if (kind === "url") continue
      if (isTestCode(to)) {
        problems.push(`fixture: ${from} imports the test helper ${to}`)
        continue
      }
      const direction = directionProblem(from, to)
      if (direction !== undefined) problems.push(`direction: ${from} -> ${to}: ${direction}`)
      const home = concreteHome(to)
      if (home !== undefined && !from.startsWith("cli/") && !from.startsWith(home) && concreteHome(from) !== home) {
        problems.push(`concrete: ${from} names the implementation ${to}; only cli/ composes implementations`)
      }
    }
    edges.set(from, targets)
  }
  for (const cycle of cycles(edges)) problems.push(`cycle: ${cycle.join(" -> ")}`)
  const reached = reachable(edges, entryPoints)
  for (const file of edges.keys()) {
    if (!reached.has(file)) {
      problems.push(
        `unreachable: ${file} is not reached from ${entryPoints.join(", ")} (dead code, or a test helper to rename *.fixture.ts)`,
      )
    }
  }
  return problems
}

function reachable(edges: ReadonlyMap<string, readonly string[]>, roots: readonly string[]): Set<string> {
  const seen = new Set<string>()
  const stack = [...roots]
  while (stack.length > 0) {
    const file = stack.pop() as string
    if (seen.has(file)) continue
    seen.add(file)
    stack.push(...(edges.get(file) ?? []))
  }
  return seen
}

/** Strongly connected components of more than one file, or a file importing itself (Tarjan). */
function cycles(edges: ReadonlyMap<string, readonly string[]>): string[][] {
  let next = 0
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: string[] = []
  const onStack = new Set<string>()
  const found: string[][] = []
  const visit = (file: string) => {
    index.set(file, next)
    low.set(file, next)
    next++
    stack.push(file)
    onStack.add(file)
    for (const to of edges.get(file) ?? []) {
      if (!edges.has(to)) continue
      if (!index.has(to)) {
        visit(to)
        low.set(file, Math.min(low.get(file) as number, low.get(to) as number))
      } else if (onStack.has(to)) low.set(file, Math.min(low.get(file) as number, index.get(to) as number))
    }
    if (low.get(file) === index.get(file)) {
      const component: string[] = []
      let member: string
      do {
        member = stack.pop() as string
        onStack.delete(member)
        component.push(member)
      } while (member !== file)
      if (component.length > 1 || edges.get(file)?.includes(file)) found.push(component.sort())
    }
  }
  for (const file of edges.keys()) if (!index.has(file)) visit(file)
  return found
}
