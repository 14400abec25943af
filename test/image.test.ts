import { expect, it } from "vitest"
import packageJson from "../package.json" with { type: "json" }
import { execute, root, runnel } from "./cli.ts"
import { describeDocker } from "./docker.ts"

// runnel's image as `make image` builds it (image/build.sh), offline, on the local daemon, then run as a user
// and the chart would run it. The build takes minutes on a busy machine: it runs once, in the first test.
const tag = `runnel:${packageJson.version}`
const docker = (...args: string[]) => execute("docker", args)

describeDocker("runnel's image (make image)", () => {
  it("builds runnel:<version of package.json> offline", { timeout: 15 * 60_000 }, async () => {
    const built = await execute("make", ["image"], { cwd: root })
    expect(built.code, built.stderr).toBe(0)
    expect(built.stdout.trim().split("\n").at(-1)).toBe(tag)
    const inspected = await docker("image", "inspect", tag, "--format", "{{json .Config.Entrypoint}} {{.Config.User}}")
    expect(inspected.stdout.trim()).toBe('["/app/bin/runnel"] 65532:65532')
  })

  it("answers --version and server --help, as a user that is not root", async () => {
    expect(await docker("run", "--rm", tag, "--version")).toMatchObject({ code: 0, stdout: `${packageJson.version}\n` })
    const help = await docker("run", "--rm", tag, "server", "--help")
    expect(help.code).toBe(0)
    expect(help.stdout).toContain("--driver <NAME>")
    expect(help.stdout).toContain("--basic-auth-password <PASSWORD>")
    expect((await docker("run", "--rm", "--entrypoint", "id", tag)).stdout).toMatch(/^uid=65532 gid=65532/)
  })

  it("runs a TypeScript pipeline: esbuild, the isolated-vm sandbox and a task in the container", async () => {
    const ran = await docker(
      "run",
      "--rm",
      "-v",
      `${root}/examples:/examples:ro`,
      tag,
      "runner",
      "/examples/hello.ts",
      "--driver",
      "native",
    )
    expect(ran.stdout).toContain("the task said: hello from runnel")
    expect(ran.code).toBe(0)
  })

  it("serves runnel server on a published port: /health, and a pipeline run through the CLI", async () => {
    const started = await docker("run", "-d", "--rm", "-p", "127.0.0.1::8080", tag, "server", "--host=0.0.0.0")
    expect(started.code).toBe(0)
    const container = started.stdout.trim()
    try {
      const port = (await docker("port", container, "8080/tcp")).stdout.trim().split("\n")[0] ?? ""
      const url = `http://${port}`
      let health: Response | undefined
      for (let tries = 0; tries < 600 && health?.status !== 200; tries++) {
        health = await fetch(`${url}/health`).catch(() => undefined)
        if (health?.status !== 200) await new Promise((done) => setTimeout(done, 100))
      }
      expect(health?.status).toBe(200)
      expect(await health?.json()).toEqual({ status: "ok" })
      // The web UI: its page, and the script esbuild bundles inside the container on the first request.
      const page = await fetch(`${url}/`)
      expect(page.status).toBe(200)
      const script = /src="(\/assets\/app\.[^"]+\.js)"/.exec(await page.text())?.[1]
      expect(script).toBeDefined()
      const bundle = await fetch(`${url}${script}`)
      expect(bundle.status).toBe(200)
      expect(bundle.headers.get("content-type")).toBe("text/javascript; charset=utf-8")
      // The image has no Docker daemon: the pipeline's task runs with the native driver, inside the container.
      const set = await runnel(["pipeline", "set", "examples/hello.ts", "--driver", "native", "-s", url])
      expect(set.code, set.stderr).toBe(0)
      const run = await runnel(["pipeline", "run", "hello", "-s", url])
      expect(run.stdout).toContain("the task said: hello from runnel")
      expect(run.code).toBe(0)
    } finally {
      await docker("rm", "-f", container)
    }
  })
})
