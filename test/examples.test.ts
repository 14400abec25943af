import { describe, expect, it } from "vitest"
import { testServer } from "../operator/engine/script-run.fixture.ts"
import { type CliResult, runnel } from "./cli.ts"
import { describeDocker } from "./docker.ts"

// Every example in examples/ runs with bin/runnel runner on both drivers, as the README shows.
type Example = { file: string; args?: string[]; code: number; check: (result: CliResult) => void }

const examples: Example[] = [
  {
    file: "hello.ts",
    code: 0,
    check: ({ stdout, stderr }) => {
      expect(stdout).toContain("hello | hello from runnel\n")
      expect(stdout).toContain("the task said: hello from runnel\n")
      expect(stderr).toMatch(/success in \d+\.\d\ds: 1 task \(1 succeeded, 0 failed\), exit code 0\n$/)
    },
  },
  {
    file: "parallel.ts",
    code: 0,
    check: ({ stdout }) => {
      for (const name of ["one", "two", "three"]) expect(stdout).toContain(`${name} | ${name}\n`)
      // Each task waits until all three have started, so they succeed only when they run in parallel.
      expect(stdout).toContain("all 3 tasks ran at the same time and succeeded\n")
    },
  },
  {
    file: "shared-volume.ts",
    code: 0,
    check: ({ stdout }) => expect(stdout).toContain("the second task read what the first one wrote\n"),
  },
  {
    file: "env-and-args.ts",
    args: ["--secret", "GREETING=bonjour-secret", "--", "first", "second"],
    code: 0,
    check: ({ stdout, stderr }) => {
      expect(stdout).toContain("show-env | args: first second\n")
      expect(stdout).toContain("show-env | target: staging\n")
      expect(stdout).toContain("show-env | greeting: ***REDACTED***\n")
      expect(stdout + stderr).not.toContain("bonjour-secret")
    },
  },
  {
    file: "failing-task.ts",
    code: 0,
    check: ({ stdout, stderr }) => {
      expect(stderr).toContain("check | about to fail\n")
      expect(stderr).toContain("✗ tasks/1/check failure (exit 3)")
      expect(stdout).toContain("the check task exited 3; handled, carrying on\n")
      expect(stderr).toMatch(/success in .*: 1 task \(0 succeeded, 1 failed\), exit code 0\n$/)
    },
  },
  {
    file: "throwing.ts",
    code: 1,
    check: ({ stdout, stderr }) => {
      expect(stdout).toContain("found version: 1.4.0-dev\n")
      expect(stderr).toMatch(/Error: deploy refused: version is not tagged \(at examples\/throwing\.ts:\d+:\d+\)\n/)
      expect(stderr).toMatch(/failure in .*, exit code 1\n$/)
    },
  },
  {
    file: "resources-and-notify.ts",
    code: 0,
    check: ({ stdout }) => {
      expect(stdout).toContain("fetched version 1.0.0: first release\n")
      expect(stdout).toContain("no URL given: fetch() and notify skipped\n")
    },
  },
]

function exampleSuite(driver: string) {
  it.each(examples)(`runs examples/$file with exit code $code`, async ({ file, args = [], code, check }) => {
    const result = await runnel(["runner", `examples/${file}`, "--driver", driver, ...args])
    expect(result.code, result.stderr).toBe(code)
    check(result)
  })
}

describe("examples on the native driver", () => {
  exampleSuite("native")

  it("runs examples/resources-and-notify.ts against a local service: fetch() reads it, the notification reaches it", async () => {
    const service = await testServer((request, response) => {
      response.writeHead(200, { "content-type": "application/json" })
      response.end(request.method === "GET" ? '{"healthy":true}' : "{}")
    })
    try {
      const result = await runnel([
        "runner",
        "examples/resources-and-notify.ts",
        "--driver",
        "native",
        "--secret",
        "HOOK_TOKEN=hook-token-value",
        "--",
        `${service.url}/ci`,
      ])
      expect(result.code, result.stderr).toBe(0)
      expect(result.stdout).toContain("the service says healthy: true\n")
      expect(result.stdout).toContain("notification sent\n")
      const posted = service.received.find((request) => request.method === "POST")
      expect(posted?.headers.authorization).toBe("hook-token-value")
      expect(JSON.parse(posted?.body ?? "{}")).toMatchObject({ name: "ci", message: "release 1.0.0 is out" })
    } finally {
      await service.close()
    }
  })
})
describeDocker("examples on the docker driver", () => exampleSuite("docker"))
