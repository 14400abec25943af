import { readdirSync, readFileSync } from "node:fs"
import { join, relative, resolve } from "node:path"
import { describe, expect, it } from "vitest"
import { checkModuleMap, type SourceFiles } from "./module-map.ts"

// Keeps the code and the map in docs/architecture.md in agreement: which module may import which.
const root = resolve(import.meta.dirname, "..")
const scanned = ["cli", "kubeserver", "lib", "operator", "apiserver"]

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) return sourceFiles(path)
    return /\.(ts|js)$/.test(entry.name) ? [path] : []
  })
}

function tree(): SourceFiles {
  const files = scanned.flatMap((dir) => sourceFiles(join(root, dir)))
  return new Map(files.map((file) => [relative(root, file), readFileSync(file, "utf8")]))
}

/** A made-up tree that follows every rule: the base each case below breaks once. */
const base: Record<string, string> = {
  "cli/main.ts": `import { serve } from "../apiserver/app.ts"
import { run } from "../operator/run.ts"
const { docker } = await import("../operator/drivers/docker/docker-driver.ts")
import { openStore } from "../lib/logs/sqlite-log-store.ts"
import { createEmbeddedApi } from "../kubeserver/embedded-api.ts"`,
  "apiserver/app.ts": `import Koa from "koa"\nimport type { Status } from "../lib/core/status.ts"`,
  "operator/run.ts": `import type { Driver } from "./drivers/driver.ts"\nimport { seal } from "../lib/secrets/sealed.ts"`,
  "operator/drivers/driver.ts": `export interface Driver {}`,
  "operator/drivers/docker/docker-driver.ts": `import { DockerHost } from "../../../lib/containers/docker-host.ts"\nimport type { Driver } from "../driver.ts"`,
  "lib/containers/docker-host.ts": `import Docker from "dockerode"\nimport { SystemError } from "../core/errors.ts"`,
  "lib/core/errors.ts": `export class SystemError extends Error {}`,
  "lib/core/status.ts": `export type Status = "success"`,
  "lib/secrets/sealed.ts": `import { seal } from "../crypto/sealer.ts"`,
  "lib/crypto/sealer.ts": `export const seal = 1`,
  "lib/logs/sqlite-log-store.ts": `import { open } from "../sqlite/database.ts"\nimport type { Status } from "../core/status.ts"`,
  "lib/sqlite/database.ts": `export const open = 1`,
  "kubeserver/embedded-api.ts": `import { open } from "../lib/sqlite/database.ts"\nimport { seal } from "../lib/crypto/sealer.ts"`,
  "apiserver/app.test.ts": `import { it } from "vitest"\nimport { createEmbeddedApi } from "../kubeserver/embedded-api.ts"`,
}

function check(changes: Record<string, string>): string[] {
  return checkModuleMap(new Map(Object.entries({ ...base, ...changes })))
}

describe("the module map", () => {
  it("holds for the tree: every import points the way docs/architecture.md allows", () => {
    expect(checkModuleMap(tree())).toEqual([])
  })

  it("holds for the made-up tree every case below starts from", () => {
    expect(check({})).toEqual([])
  })

  it.each([
    [
      "an operator file importing the API server",
      "operator/run.ts",
      `import { serve } from "../apiserver/app.ts"`,
      "direction: operator/run.ts -> apiserver/app.ts",
    ],
    [
      "the API server importing the operator",
      "apiserver/app.ts",
      `import { run } from "../operator/run.ts"`,
      "direction: apiserver/app.ts -> operator/run.ts",
    ],
    [
      "lib importing the operator",
      "lib/core/status.ts",
      `import { run } from "../../operator/run.ts"`,
      "direction: lib/core/status.ts -> operator/run.ts",
    ],
    [
      "a lib sibling against the direction (core importing logs)",
      "lib/core/status.ts",
      `import { open } from "../logs/sqlite-log-store.ts"`,
      "direction: lib/core/status.ts -> lib/logs/sqlite-log-store.ts",
    ],
    [
      "a lib module missing from the table",
      "lib/notify/slack.ts",
      `import type { Status } from "../core/status.ts"`,
      "direction: lib/notify/slack.ts -> lib/core/status.ts: lib/notify is not in the lib/ dependency table",
    ],
    [
      "the sealer importing runnel's domain",
      "lib/crypto/sealer.ts",
      `import { seal } from "../secrets/sealed.ts"`,
      "direction: lib/crypto/sealer.ts -> lib/secrets/sealed.ts",
    ],
    [
      "the SQLite helper importing runnel's domain",
      "lib/sqlite/database.ts",
      `import type { Status } from "../logs/sqlite-log-store.ts"`,
      "direction: lib/sqlite/database.ts -> lib/logs/sqlite-log-store.ts",
    ],
    [
      "the embedded API importing runnel's domain",
      "kubeserver/embedded-api.ts",
      `import type { Status } from "../lib/core/status.ts"`,
      "direction: kubeserver/embedded-api.ts -> lib/core/status.ts",
    ],
    [
      "the container module importing runnel's domain",
      "lib/containers/docker-host.ts",
      `import type { Status } from "../logs/sqlite-log-store.ts"`,
      "direction: lib/containers/docker-host.ts -> lib/logs/sqlite-log-store.ts",
    ],
    [
      "a driver importing a lib module other than core and containers",
      "operator/drivers/docker/docker-driver.ts",
      `import { open } from "../../../lib/logs/sqlite-log-store.ts"`,
      "direction: operator/drivers/docker/docker-driver.ts -> lib/logs/sqlite-log-store.ts",
    ],
    [
      "a driver importing the engine",
      "operator/drivers/docker/docker-driver.ts",
      `import { run } from "../../run.ts"`,
      "direction: operator/drivers/docker/docker-driver.ts -> operator/run.ts",
    ],
  ])("fails on %s", (_, file, text, expected) => {
    expect(check({ [file]: text }).join("\n")).toContain(expected)
  })

  it("fails on a concrete implementation named outside cli/: a driver, a store backend, the embedded API", () => {
    const problems = check({
      "operator/run.ts": `import { docker } from "./drivers/docker/docker-driver.ts"
import { openStore } from "../lib/logs/sqlite-log-store.ts"`,
      "apiserver/app.ts": `import { createEmbeddedApi } from "../kubeserver/embedded-api.ts"`,
    })
    expect(problems).toEqual(
      expect.arrayContaining([
        expect.stringMatching(
          /^concrete: operator\/run.ts names the implementation operator\/drivers\/docker\/docker-driver.ts/,
        ),
        expect.stringMatching(/^concrete: operator\/run.ts names the implementation lib\/logs\/sqlite-log-store.ts/),
        expect.stringMatching(/^direction: apiserver\/app.ts -> kubeserver\/embedded-api.ts/),
        expect.stringMatching(/^concrete: apiserver\/app.ts names the implementation kubeserver\/embedded-api.ts/),
      ]),
    )
  })

  it("fails on a cycle, type-only imports included", () => {
    const problems = check({
      "apiserver/app.ts": `import type { Index } from "./index-of.ts"\nexport type App = {}`,
      "apiserver/index-of.ts": `import type { App } from "./app.ts"\nexport type Index = {}`,
    })
    expect(problems).toContain("cycle: apiserver/app.ts -> apiserver/index-of.ts")
  })

  it("scans dynamic import(), side-effect imports and re-exports, and refuses a computed import()", () => {
    expect(check({ "lib/core/status.ts": `const m = await import("../../operator/run.ts")` }).join("\n")).toContain(
      "direction: lib/core/status.ts -> operator/run.ts",
    )
    expect(check({ "lib/core/status.ts": `import "../../apiserver/app.ts"` }).join("\n")).toContain(
      "direction: lib/core/status.ts -> apiserver/app.ts",
    )
    expect(check({ "lib/core/status.ts": `export { serve } from "../../apiserver/app.ts"` }).join("\n")).toContain(
      "direction: lib/core/status.ts -> apiserver/app.ts",
    )
    const computed = ["const m = await import(`./drivers/$", "{name}.ts`)"].join("")
    expect(check({ "operator/run.ts": computed }).join("\n")).toContain(
      "dynamic-import: operator/run.ts imports a computed name",
    )
  })

  it("fails on a package outside its place, bare specifiers included", () => {
    expect(check({ "lib/core/status.ts": `import Docker from "dockerode"` }).join("\n")).toContain(
      "package: lib/core/status.ts imports dockerode, which belongs only in lib/containers/",
    )
    expect(check({ "cli/main.ts": `${base["cli/main.ts"]}\nimport ivm from "isolated-vm"` }).join("\n")).toContain(
      "package: cli/main.ts imports isolated-vm",
    )
  })

  it("takes the Kubernetes client through lib/kube/client-node.d.ts alone, and checks its generated module as it", () => {
    const client = {
      "lib/kube/client-node.d.ts": `export { Watch } from "@kubernetes/client-node"`,
      // Generated at install; its own imports are the package's files and dependencies, not checked.
      "lib/kube/client-node.js": `import { fetch } from "undici"\nimport Koa from "koa"\nexport class Watch {}`,
      "lib/kube/informer.ts": `import { Watch } from "./client-node.js"`,
      "operator/run.ts": `${base["operator/run.ts"]}\nimport "../lib/kube/informer.ts"`,
    }
    expect(check(client)).toEqual([])
    expect(
      check({
        ...client,
        "apiserver/app.ts": `${base["apiserver/app.ts"]}\nimport { Watch } from "@kubernetes/client-node"`,
      }),
    ).toEqual([
      "package: apiserver/app.ts imports @kubernetes/client-node, which belongs only in lib/kube/client-node.d.ts",
    ])
  })

  it("fails on a test helper in a production name, or production code importing a test helper", () => {
    expect(check({ "operator/drivers/driver.ts": `import { it } from "vitest"` }).join("\n")).toContain(
      "package: operator/drivers/driver.ts imports vitest, which belongs only in tests",
    )
    expect(
      check({
        "operator/run.ts": `import { contract } from "./drivers/driver-contract.fixture.ts"`,
        "operator/drivers/driver-contract.fixture.ts": `import { it } from "vitest"`,
      }).join("\n"),
    ).toContain("fixture: operator/run.ts imports the test helper operator/drivers/driver-contract.fixture.ts")
  })

  it("fails on a production file nothing reaches: dead code or a helper only tests use", () => {
    expect(check({ "lib/logs/task-log-helper.ts": `export const helper = 1` })).toContain(
      "unreachable: lib/logs/task-log-helper.ts is not reached from cli/main.ts (dead code, or a test helper to rename *.fixture.ts)",
    )
  })
})
