import { readdirSync, readFileSync } from "node:fs"
import { dirname, join, relative, resolve } from "node:path"
import { describe, expect, it } from "vitest"

// Keeps the code and the map in ../shared/ARCHITECTURE.md in agreement: which module may import which.
const root = resolve(import.meta.dirname, "..")
const skipped = new Set(["node_modules", ".git", "test-e2e", "charts", "crds"])

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    if (skipped.has(entry.name)) return []
    const path = join(dir, entry.name)
    if (entry.isDirectory()) return sourceFiles(path)
    return /\.(ts|js)$/.test(entry.name) && !entry.name.endsWith(".test.ts") ? [path] : []
  })
}

function projectImports(file: string): string[] {
  const text = readFileSync(file, "utf8")
  const specifiers = [...text.matchAll(/(?:^|\n)\s*(?:import|export)\b[^'"]*?from\s+["']([^"']+)["']/g)].map(
    (m) => m[1],
  )
  return specifiers
    .filter((specifier): specifier is string => specifier?.startsWith(".") === true)
    .map((specifier) => relative(root, resolve(dirname(file), specifier)))
}

const top = (path: string) => path.split("/")[0]

/** The lib/ modules without runnel's domain in them: all that kubeserver/ may import beside itself. */
const domainFree = ["lib/core/", "lib/crypto/", "lib/sqlite/"]

/** What each place may import from the project; anything not listed is a violation. */
function allowed(from: string, to: string): boolean {
  if (from.startsWith("kubeserver/"))
    return to.startsWith("kubeserver/") || domainFree.some((dir) => to.startsWith(dir))
  if (from.startsWith("lib/core/")) return to.startsWith("lib/core/")
  // Infrastructure without runnel's domain: it imports the basics of core and itself, nothing else.
  const infrastructure = domainFree.find((dir) => dir !== "lib/core/" && from.startsWith(dir))
  if (infrastructure !== undefined) return to.startsWith(infrastructure) || to.startsWith("lib/core/")
  if (from.startsWith("lib/")) return to.startsWith("lib/")
  if (from.startsWith("operator/drivers/")) {
    const own = from.split("/").slice(0, 3).join("/")
    return to.startsWith("lib/core/") || to === "operator/drivers/driver.ts" || to.startsWith(`${own}/`)
  }
  if (from.startsWith("operator/")) {
    const concreteDriver = /^operator\/drivers\/[^/]+\//.test(to)
    return !concreteDriver && (to.startsWith("lib/") || to.startsWith("operator/"))
  }
  if (from.startsWith("apiserver/")) return to.startsWith("lib/") || to.startsWith("apiserver/")
  if (from.startsWith("bench/") || from.startsWith("test/")) return true
  return top(from) === "cli" || top(from) === "types" || top(from) === "examples" || from === "vitest.config.ts"
}

describe("the module map", () => {
  it("has every import pointing the way ARCHITECTURE.md allows", () => {
    const violations = sourceFiles(root).flatMap((file) => {
      const from = relative(root, file)
      return projectImports(file)
        .filter((to) => !allowed(from, to))
        .map((to) => `${from} -> ${to}`)
    })
    expect(violations).toEqual([])
  })

  it("catches an import against the direction", () => {
    expect(allowed("lib/logs/log-sink.ts", "operator/engine/engine.ts")).toBe(false)
    expect(allowed("operator/engine/engine.ts", "operator/drivers/docker/docker-driver.ts")).toBe(false)
    expect(allowed("operator/drivers/docker/docker-driver.ts", "operator/engine/engine.ts")).toBe(false)
    expect(allowed("apiserver/routes/runs.ts", "operator/engine/engine.ts")).toBe(false)
    expect(allowed("lib/core/errors.ts", "lib/logs/redactor.ts")).toBe(false)
    expect(allowed("lib/sqlite/database.ts", "lib/logs/log-store.ts")).toBe(false)
    expect(allowed("lib/crypto/sealer.ts", "lib/secrets/secret-store.ts")).toBe(false)
    expect(allowed("lib/crypto/sealer.ts", "lib/sqlite/database.ts")).toBe(false)
    expect(allowed("kubeserver/object-store.ts", "lib/secrets/secret-store.ts")).toBe(false)
    expect(allowed("kubeserver/object-store.ts", "lib/sqlite/database.ts")).toBe(true)
  })
})
