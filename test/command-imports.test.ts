import { spawn } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { root } from "./cli.ts"

// Each command loads only what it uses (issue 10): the client commands and --help need no Kubernetes
// client, Docker client or sandbox; the runner needs no Kubernetes client.
const dir = mkdtempSync(join(tmpdir(), "runnel-command-imports-test-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

let count = 0
/** Runs cli/main.ts with `args` as bin/runnel does; answers the npm packages the process loaded. */
function loadedPackages(args: readonly string[]): Promise<{ code: number | null; packages: string[] }> {
  const file = join(dir, `loaded-${++count}`)
  return new Promise((resolve, reject) => {
    const child = spawn(
      join(root, "node_modules/.bin/node"),
      [
        "--disable-warning=ExperimentalWarning",
        "--import",
        join(root, "test/loaded-packages.fixture.ts"),
        join(root, "cli/main.ts"),
        ...args,
      ],
      { cwd: dir, env: { ...process.env, RUNNEL_TEST_LOADED_PACKAGES: file }, stdio: "ignore" },
    )
    child.on("error", reject)
    child.on("close", (code) =>
      resolve({
        code,
        packages: readFileSync(file, "utf8")
          .split("\n")
          .filter((name) => name !== ""),
      }),
    )
  })
}

const heavy = ["@kubernetes/client-node", "dockerode", "isolated-vm", "koa", "esbuild"]

describe("what each command loads", () => {
  it("--help loads commander alone", async () => {
    const { code, packages } = await loadedPackages(["--help"])
    expect(code).toBe(0)
    expect(packages).toEqual(["commander"])
  })

  it.each([
    [["pipeline", "ls"]],
    [["pipeline", "set", "missing.ts"]],
    [["pipeline", "trigger", "x"]],
    [["pipeline", "rm", "x"]],
  ])("runnel %j loads no Kubernetes client, Docker client, sandbox or server", async (args) => {
    // Nothing listens on port 1: the command fails after it has loaded everything it would use.
    const { code, packages } = await loadedPackages([...args, "--server-url", "http://127.0.0.1:1"])
    expect(code).toBe(2)
    for (const name of heavy) expect(packages).not.toContain(name)
  })

  it("runner with the native driver loads no Kubernetes client, Docker client or server", async () => {
    const file = join(dir, "noop.ts")
    writeFileSync(file, "export const pipeline = async () => {}\n")
    const { code, packages } = await loadedPackages(["runner", file, "--driver", "native"])
    expect(code).toBe(0)
    expect(packages).toContain("isolated-vm")
    for (const name of ["@kubernetes/client-node", "dockerode", "koa"]) expect(packages).not.toContain(name)
  })
})
