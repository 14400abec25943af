import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { runnel } from "./cli.ts"
import { describeDocker } from "./docker.ts"
import { erroringYaml } from "./server-process.ts"

const dir = mkdtempSync(join(tmpdir(), "runnel-runner-test-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

function pipelineFile(name: string, source: string): string {
  const path = join(dir, name)
  writeFileSync(path, source)
  return path
}

/** A user's mistake is one paragraph on stderr, never a stack trace. */
function expectPlainError(stderr: string, message: string | RegExp) {
  expect(stderr).toMatch(message)
  expect(stderr).not.toMatch(/\n\s+at .+:\d+:\d+/)
}

describe("runnel runner on bad input", () => {
  it("names a missing file", async () => {
    const result = await runnel(["runner", "no-such-pipeline.ts", "--driver", "native"])
    expect(result.code).toBe(2)
    expect(result.stderr).toBe('runnel: cannot read pipeline file "no-such-pipeline.ts": no such file\n')
  })

  it("refuses a file without a pipeline export", async () => {
    const file = pipelineFile("no-export.ts", "export const build = async () => {}\n")
    const result = await runnel(["runner", file, "--driver", "native"])
    expect(result.code).toBe(2)
    expectPlainError(
      result.stderr,
      /error: .*no-export\.ts does not export a pipeline function; add `export const pipeline/,
    )
  })

  it("shows a syntax error with line and column", async () => {
    const file = pipelineFile("broken.ts", "export const pipeline = async () => {\n  const x = ;\n}\n")
    const result = await runnel(["runner", file, "--driver", "native"])
    expect(result.code).toBe(2)
    expectPlainError(result.stderr, /error: .*broken\.ts:2:13: Unexpected ";"\n {4} {2}const x = ;\n/)
    expect(result.stderr).toMatch(/error in .*: 0 tasks .*exit code 2\n$/)
  })

  it("lists the known drivers for an unknown one", async () => {
    const file = pipelineFile("ok.ts", "export const pipeline = async () => {}\n")
    const result = await runnel(["runner", file, "--driver", "podman"])
    expect(result.code).toBe(2)
    expect(result.stderr).toBe('runnel: unknown driver "podman"; known: docker, native, kubernetes\n')
  })

  it("fails the run at once on a missing secret, naming the key", async () => {
    const file = pipelineFile(
      "secret.ts",
      `export const pipeline = async () => {
        try { await runtime.run({ name: "deploy", image: "busybox", command: { path: "true" }, env: { TOKEN: "secret:DEPLOY_TOKEN" } }) }
        catch { console.log("caught, carrying on") }
        await runtime.run({ name: "after", image: "busybox", command: { path: "true" } })
      }`,
    )
    const result = await runnel(["runner", file, "--driver", "native", "--secret", "OTHER=x"])
    expect(result.code).toBe(2)
    expectPlainError(result.stderr, /error: secret "DEPLOY_TOKEN" is not set: task "deploy" asks for it in env TOKEN/)
    expect(result.stderr).not.toContain("tasks/2/after started")
  })

  it("fails with the script's line when a task has no image", async () => {
    const file = pipelineFile(
      "no-image.ts",
      'export const pipeline = async () => {\n  await runtime.run({ name: "build", command: { path: "true" } })\n}\n',
    )
    const result = await runnel(["runner", file, "--driver", "native"])
    expect(result.code).toBe(1)
    expectPlainError(
      result.stderr,
      /Error: runtime.run: task "build" has no image; set image, for example image: "busybox" \(at .*no-image\.ts:2:17\)\n/,
    )
  })

  it("fails when a task has no command", async () => {
    const file = pipelineFile(
      "no-command.ts",
      'export const pipeline = async () => { await runtime.run({ name: "b", image: "busybox" }) }\n',
    )
    const result = await runnel(["runner", file, "--driver", "native"])
    expect(result.code).toBe(1)
    expect(result.stderr).toContain(
      'runtime.run: task "b" has no command; set command: { path: "sh", args: ["-c", "echo hello"] }',
    )
  })

  it("fails when an env value is not a string", async () => {
    const file = pipelineFile(
      "env-number.ts",
      'export const pipeline = async () => {\n  await runtime.run({ name: "b", image: "busybox", command: { path: "true" }, env: { PORT: 8080 } })\n}\n',
    )
    const result = await runnel(["runner", file, "--driver", "native"])
    expect(result.code).toBe(1)
    expect(result.stderr).toContain(
      'runtime.run: task "b": env.PORT is 8080 (number), not a string; write it as a string, for example "8080"',
    )
  })

  it("ends a runaway loop at --pipeline-timeout with status error", async () => {
    const file = pipelineFile("loop.ts", "export const pipeline = async () => { for (;;) {} }\n")
    const result = await runnel(["runner", file, "--driver", "native", "--pipeline-timeout", "500ms"])
    expect(result.code).toBe(2)
    expectPlainError(
      result.stderr,
      /error: the pipeline ran longer than its time limit \(--pipeline-timeout 500ms\) and was stopped\n/,
    )
  })

  it("ends a memory bomb at --pipeline-memory-mb with status error", async () => {
    const file = pipelineFile(
      "bomb.ts",
      "export const pipeline = async () => { const a = []; for (;;) a.push(new Array(1e5).fill(a.length)) }\n",
    )
    const result = await runnel(["runner", file, "--driver", "native", "--pipeline-memory-mb", "32"])
    expect(result.code).toBe(2)
    expectPlainError(
      result.stderr,
      /error: the pipeline used more memory than its limit \(--pipeline-memory-mb 32\) and was stopped\n/,
    )
  })

  it("exits 2 for a YAML run that ends in status error, as for a script's", async () => {
    const result = await runnel(["runner", pipelineFile("undefined-variable.yml", erroringYaml), "--driver", "native"])
    expect(result.code).toBe(2)
    expect(result.stderr).toContain("✗ jobs/j/1/task/use error")
    expectPlainError(result.stderr, /\nerror: jobs\/j\/1\/task\/use: undefined variable \(\(nope\)\)/)
    expect(result.stderr).toMatch(/\nerror in [\d.]+s: 1 task \(0 succeeded, 0 failed, 1 error\), exit code 2\n$/)
  })

  it.each([
    [["--secret", "NOEQUALS"], '--secret "NOEQUALS=…" is not KEY=VALUE; write it as --secret API_TOKEN=value'],
    [["--pipeline-timeout", "soon"], 'invalid duration "soon"'],
    [["--pipeline-memory-mb", "-4"], '--pipeline-memory-mb must be a positive whole number, not "-4"'],
  ])("refuses bad flags %j with a message", async (flags, message) => {
    const file = pipelineFile("fine.ts", "export const pipeline = async () => {}\n")
    const result = await runnel(["runner", file, "--driver", "native", ...flags])
    expect(result.code).toBe(2)
    expectPlainError(result.stderr, new RegExp(`^runnel: ${message.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}`))
  })

  it("reads flags from CI_* variables, and the flag beats its variable", async () => {
    const file = pipelineFile("loop2.ts", "export const pipeline = async () => { for (;;) {} }\n")
    const fromEnv = await runnel(["runner", file, "--driver", "native"], { env: { CI_PIPELINE_TIMEOUT: "300ms" } })
    expect(fromEnv.stderr).toContain("--pipeline-timeout 300ms")
    const fromFlag = await runnel(["runner", file, "--driver", "native", "--pipeline-timeout", "400ms"], {
      env: { CI_PIPELINE_TIMEOUT: "300ms" },
    })
    expect(fromFlag.stderr).toContain("--pipeline-timeout 400ms")
  })

  it("runs from any working directory and without a Docker daemon when no task runs", async () => {
    const file = pipelineFile("no-tasks.ts", "export const pipeline = async () => { console.log('nothing to run') }\n")
    const result = await runnel(["runner", file], { cwd: dir, env: { DOCKER_HOST: "unix:///nonexistent/docker.sock" } })
    expect(result.code).toBe(0)
    expect(result.stdout).toBe("nothing to run\n")
  })

  it("says where the Docker daemon was looked for when it does not answer", async () => {
    const file = pipelineFile(
      "one-task.ts",
      'export const pipeline = async () => { await runtime.run({ name: "t", image: "busybox", command: { path: "true" } }) }\n',
    )
    const result = await runnel(["runner", file], { env: { DOCKER_HOST: "unix:///nonexistent/docker.sock" } })
    expect(result.code).toBe(2)
    expectPlainError(result.stderr, /error: .*\/nonexistent\/docker\.sock.*start Docker, or run with --driver native/)
  })

  it("shows help for the program and the runner command", async () => {
    const top = await runnel(["--help"])
    expect(top.code).toBe(0)
    expect(top.stdout).toContain("runner [options] <file> [args...]")
    const help = await runnel(["runner", "--help"])
    expect(help.code).toBe(0)
    const runner = { stdout: help.stdout.replace(/\s+/g, " ") }
    for (const flag of [
      "--driver <NAME>",
      "--secret <KEY=VALUE>",
      "--storage-sqlite-path <PATH>",
      "--pipeline-memory-mb <MB>",
      "--pipeline-timeout <DURATION>",
    ]) {
      expect(runner.stdout).toContain(flag)
    }
    expect(runner.stdout).toContain("env CI_PIPELINE_TIMEOUT, default 1h")
  })
})

describeDocker("runnel runner with Docker", () => {
  it("names an image that cannot be had", async () => {
    const file = pipelineFile(
      "no-image-here.ts",
      'export const pipeline = async () => { await runtime.run({ name: "t", image: "runnel-test/no-such-image:1", command: { path: "true" } }) }\n',
    )
    const result = await runnel(["runner", file])
    expect(result.code).toBe(2)
    expectPlainError(result.stderr, /error: image "runnel-test\/no-such-image:1" could not be pulled: /)
  })
})
