import { readFileSync } from "node:fs"
import { describe, expect, it } from "vitest"
import { parseTaskConfigFile, parseYamlPipeline, validateTaskConfig } from "./parse.ts"
import type { Step, TaskStep } from "./types.ts"
import { YamlPipelineError } from "./yaml-pipeline-error.ts"

const full = readFileSync(new URL("testdata/full.yml", import.meta.url), "utf8")

function stepAt(steps: readonly Step[], index: number): Step {
  const step = steps[index]
  if (step === undefined) throw new Error(`no step ${index}`)
  return step
}

describe("parseYamlPipeline on a valid pipeline", () => {
  const pipeline = parseYamlPipeline(full)
  const [build, test] = pipeline.jobs

  it("reads the top level", () => {
    expect(pipeline.maxInFlight).toBe(2)
    expect(pipeline.varSources).toEqual([{ name: "local", type: "dummy", vars: { greeting: "hello" } }])
    expect(pipeline.resourceTypes).toEqual([
      expect.objectContaining({
        name: "custom",
        type: "registry-image",
        source: { repository: "example/custom-resource" },
      }),
    ])
    expect(pipeline.groups).toEqual([{ name: "all", jobs: ["build", "test", "deploy-*"], resources: [] }])
    expect(pipeline.jobs.map((job) => job.name)).toEqual(["build", "test"])
  })

  it("keeps resources with their source, variables left in place", () => {
    expect(pipeline.resources[0]).toEqual({
      at: { path: "resources[0]", line: 13 },
      name: "repo",
      type: "git",
      icon: "github",
      checkEvery: "1m",
      source: { uri: "https://example.com/repo.git", branch: "((branch))" },
      tags: [],
      public: false,
      exposeBuildCreatedBy: false,
    })
  })

  it("reads a job's settings, schedule and hooks", () => {
    expect(build).toMatchObject({
      at: { path: "jobs[0]", line: 27 },
      serial: true,
      serialGroups: ["builders"],
      maxInFlight: 1,
      webhookTrigger: "eventType == 'push'",
      triggers: { schedule: { cron: "0 * * * *" } },
      onSuccess: { kind: "do", steps: [{ kind: "put", name: "repo", inputs: ["built"], getParams: { depth: 1 } }] },
      ensure: { kind: "try", step: { kind: "task", name: "cleanup", config: { imageResource: { type: "mock" } } } },
    })
    expect(test?.triggers).toEqual({ schedule: { every: "1h" } })
  })

  it("reads an inline task with every field", () => {
    const compile = stepAt(build?.plan ?? [], 1) as TaskStep
    expect(compile).toEqual({
      kind: "task",
      name: "compile",
      at: { path: "jobs[0].plan[1]", line: 40 },
      timeout: "10m",
      attempts: 3,
      tags: [],
      privileged: true,
      params: { GOOS: "linux", NESTED: { a: [1, 2] } },
      vars: {},
      inputMapping: { source: "repo" },
      outputMapping: { bin: "built" },
      containerLimits: { cpu: 512, memoryBytes: 1024 ** 3 },
      hermetic: false,
      config: {
        platform: "linux",
        imageResource: { type: "registry-image", source: { repository: "golang", tag: "1.22" }, params: {} },
        inputs: [
          { name: "source", optional: false },
          { name: "cache", path: "cache-dir", optional: true },
        ],
        outputs: [{ name: "bin" }],
        caches: [{ path: ".gocache" }],
        params: { CGO_ENABLED: 0 },
        run: { path: "sh", args: ["-c", "go build -o ../bin ./..."], dir: "source", user: "root" },
      },
      onFailure: {
        kind: "put",
        name: "repo",
        resource: "repo",
        at: { path: "jobs[0].plan[1].on_failure", line: 70 },
        params: { status: "failed" },
        getParams: {},
        noGet: true,
        tags: [],
      },
    })
  })

  it("reads in_parallel, get, task files, load_var and set_pipeline", () => {
    const plan = build?.plan ?? []
    expect(stepAt(plan, 0)).toMatchObject({
      kind: "in_parallel",
      failFast: false,
      steps: [
        { kind: "get", name: "repo", resource: "repo", trigger: true, passed: [] },
        { kind: "get", name: "image", params: { format: "oci" }, trigger: false },
      ],
    })
    expect(stepAt(plan, 2)).toMatchObject({
      kind: "task",
      file: "repo/ci/test.yml",
      image: "built",
      vars: { version: "1.0" },
    })
    expect(stepAt(plan, 2)).not.toHaveProperty("config")
    expect(stepAt(plan, 3)).toMatchObject({
      kind: "load_var",
      name: "version",
      file: "built/version.json",
      format: "json",
      reveal: true,
    })
    expect(stepAt(plan, 4)).toMatchObject({
      kind: "set_pipeline",
      name: "self",
      vars: { branch: "main" },
      varFiles: [],
    })
  })

  it("reads passed, version, in_parallel with limit and across", () => {
    const plan = test?.plan ?? []
    expect(stepAt(plan, 0)).toMatchObject({ kind: "get", passed: ["build"], version: "every" })
    expect(stepAt(plan, 1)).toMatchObject({
      kind: "in_parallel",
      limit: 2,
      failFast: true,
      steps: [
        {
          kind: "task",
          name: "unit-((.:os))",
          across: [{ var: "os", values: ["linux", "darwin"], maxInFlight: "all", failFast: true }],
        },
        { kind: "set_pipeline", name: "other-pipeline" },
      ],
    })
  })

  it("reads YAML 1.1 booleans and merge keys as Concourse does", () => {
    const pipeline = parseYamlPipeline(
      `
resources:
- name: repo
  type: git
  source: {start: 9:30, day: 2024-01-01}
hooks:
jobs:
- name: a
  plan:
  - get: repo
    trigger: yes
    params: &p {depth: 1}
  - put: repo
    params:
      <<: *p
      extra: on
`.replace("hooks:\n", ""),
    )
    const [get, put] = pipeline.jobs[0]?.plan ?? []
    expect(get).toMatchObject({ trigger: true })
    expect(put).toMatchObject({ params: { depth: 1, extra: true } })
    expect(pipeline.resources[0]?.source).toEqual({ start: "9:30", day: "2024-01-01" })
  })

  it("accepts an undefined variable at store time", () => {
    const pipeline = parseYamlPipeline(`
jobs:
- name: a
  plan:
  - task: t
    timeout: ((timeout))
    file: ((secret:repo))/task.yml
`)
    expect(pipeline.jobs[0]?.plan[0]).toMatchObject({ timeout: "((timeout))", file: "((secret:repo))/task.yml" })
  })

  it("parses the same text twice into equal structures", () => {
    expect(parseYamlPipeline(full)).toEqual(pipeline)
  })
})

describe("task config files", () => {
  it("parses a task file into a TaskConfig", () => {
    const config = parseTaskConfigFile("platform: linux\nrun:\n  path: make\n  args: [test]\n", "repo/ci/test.yml")
    expect(config).toEqual({
      platform: "linux",
      inputs: [],
      outputs: [],
      caches: [],
      params: {},
      run: { path: "make", args: ["test"] },
    })
  })

  it("names the file, the path and the line of each problem", () => {
    expect(() => parseTaskConfigFile("platform: linux\nrun:\n  args: [test]\n", "repo/ci/test.yml")).toThrow(
      "repo/ci/test.yml: run: run needs the path of the program to run, for example path: sh (line 2)",
    )
    expect(() => parseTaskConfigFile("run: {path: sh}\nimage_resorce: {}\n", "t.yml")).toThrow(
      [
        "t.yml has 2 problems:",
        "- the task config needs a platform, for example platform: linux (line 1)",
        '- image_resorce: unknown key "image_resorce" in the task config; did you mean "image_resource"? (line 2)',
      ].join("\n"),
    )
  })

  it("validates a config already read into values", () => {
    expect(validateTaskConfig({ platform: "linux", run: { path: "sh" } }, "t")).toMatchObject({
      run: { path: "sh", args: [] },
    })
    expect(() => validateTaskConfig({ run: { path: "sh" } }, "t")).toThrow(
      "t: the task config needs a platform, for example platform: linux",
    )
    expect(() => validateTaskConfig(null, "t")).toThrow(YamlPipelineError)
  })
})
