import { describe, expect, it } from "vitest"
import { parseYamlPipeline } from "./parse.ts"
import { YamlPipelineError } from "./yaml-pipeline-error.ts"

/** The error a person sees for `text`; fails the test when the text is accepted. */
function errorOf(text: string): YamlPipelineError {
  try {
    parseYamlPipeline(text)
  } catch (error) {
    if (error instanceof YamlPipelineError) return error
    throw error
  }
  throw new Error("the pipeline was accepted")
}

const messageOf = (text: string) => errorOf(text).message

// A valid base the cases below break one thing in; `repo` is used by `build`.
const base = (extra: string) => `resources:
- name: repo
  type: git
jobs:
- name: build
  plan:
  - get: repo
${extra}`

describe("store-time validation, as fly set-pipeline", () => {
  it("accepts the base pipeline", () => {
    expect(parseYamlPipeline(base("")).jobs).toHaveLength(1)
  })

  // atc/config.go, UnmarshalConfig: only the known top-level keys survive to
  // the strict parse, so anchors parked under `shared:` are fine.
  it("ignores an unknown top-level key, as atc/config.go does, with a note naming it, its line and a suggestion", () => {
    const pipeline = parseYamlPipeline(`shared:
  get-repo: &get-repo {get: repo}
resource_type: []
${base("  - *get-repo")}`)
    expect(pipeline.jobs[0]?.plan).toHaveLength(2)
    expect(pipeline.notes).toEqual([
      'line 1: top-level key "shared" ignored, as Concourse ignores it',
      'line 3: top-level key "resource_type" ignored, as Concourse ignores it; did you mean "resource_types"?',
    ])
    expect(parseYamlPipeline(base("")).notes).toEqual([])
  })

  it("still refuses an unknown key in a job, as Concourse's strict parse does", () => {
    expect(messageOf(`${base("")}  shared: {}\n`)).toBe(
      'jobs[0].shared: unknown key "shared" in job "build"; known keys: name, plan, serial, serial_groups, max_in_flight, webhook_trigger, triggers, on_success, on_failure, on_error, on_abort, ensure, public, disable_manual_trigger, interruptible, old_name, build_log_retention, build_logs_to_retain (line 8)',
    )
  })

  it("refuses an unknown key deep in a task config", () => {
    expect(
      messageOf(
        base(`  - task: unit
    config:
      platform: linux
      run:
        path: sh
        agrs: [-c, "true"]
`),
      ),
    ).toBe('jobs[0].plan[1].config.run.agrs: unknown key "agrs" in run; did you mean "args"? (line 13)')
  })

  it("lists the known keys when no key is close", () => {
    expect(messageOf(base("  - get: repo\n    wibble: 1\n"))).toBe(
      'jobs[0].plan[1].wibble: unknown key "wibble" in a get step; known keys: get, resource, passed, trigger, params, version, timeout, attempts, tags, across, on_success, on_failure, on_error, on_abort, ensure (line 9)',
    )
  })

  it("refuses a job defined twice", () => {
    expect(messageOf(base("- name: build\n  plan: [{get: repo}]\n"))).toBe(
      'jobs[1].name: job "build" is defined twice; the first is jobs[0].name, on line 5 (line 8)',
    )
  })

  it("refuses a resource defined twice", () => {
    expect(messageOf(base("").replace("jobs:", "- name: repo\n  type: s3\njobs:"))).toBe(
      'resources[1].name: resource "repo" is defined twice; the first is resources[0].name, on line 2 (line 4)',
    )
  })

  it("refuses passed: naming an unknown job, suggesting a close one", () => {
    expect(messageOf(base("- name: test\n  plan:\n  - get: repo\n    passed: [biuld]\n"))).toBe(
      'jobs[1].plan[0].passed[0]: job "biuld" is not defined; did you mean "build"? (line 11)',
    )
  })

  it("refuses passed: forming a cycle", () => {
    const text = `resources:
- name: repo
  type: git
jobs:
- name: a
  plan:
  - get: repo
    passed: [b]
- name: b
  plan:
  - get: repo
    passed: [a]
`
    expect(messageOf(text)).toBe(
      "jobs[1].plan[0].passed[0]: passed: forms a cycle (a → b → a); a job can take versions only from jobs before it (line 12)",
    )
  })

  it("refuses passed: naming the job itself", () => {
    expect(messageOf(base("    passed: [build]\n"))).toBe(
      "jobs[0].plan[0].passed[0]: passed: forms a cycle (build → build); a job can take versions only from jobs before it (line 8)",
    )
  })

  it("refuses passed: naming a job that never touches the resource", () => {
    const text = `resources:
- name: repo
  type: git
- name: other
  type: git
jobs:
- name: build
  plan: [{get: other}]
- name: test
  plan:
  - get: repo
    passed: [build]
`
    expect(messageOf(text)).toBe(
      'jobs[1].plan[0].passed[0]: job "build" neither gets nor puts resource "repo", so no version of it can pass that job (line 12)',
    )
  })

  it("refuses a get of an undeclared resource", () => {
    expect(messageOf(base("  - get: rep0\n"))).toBe(
      'jobs[0].plan[1].get: resource "rep0" is not declared in resources; did you mean "repo"? (line 8)',
    )
  })

  it("refuses a put naming an undeclared resource with resource:", () => {
    expect(messageOf(base("  - put: out\n    resource: nowhere\n"))).toBe(
      'jobs[0].plan[1].resource: resource "nowhere" is not declared in resources (line 9)',
    )
  })

  it("refuses a resource that no job uses", () => {
    expect(messageOf(base("").replace("resources:", "resources:\n- name: spare\n  type: git"))).toBe(
      'resources[0].name: resource "spare" is not used by any job; use it in a get or put step, or remove it (line 2)',
    )
  })

  it("counts gets and puts inside hooks and nested steps as uses", () => {
    const text = `resources:
- name: a
  type: git
- name: b
  type: git
jobs:
- name: build
  plan:
  - try:
      in_parallel: [{get: a}]
  ensure:
    do: [{put: b}]
`
    expect(parseYamlPipeline(text).resources).toHaveLength(2)
  })

  it("refuses a task without config or file", () => {
    expect(messageOf(base("- name: test\n  plan:\n  - task: unit\n    privileged: true\n"))).toBe(
      'jobs[1].plan[0].task: task "unit" has neither config nor file; give it config: (platform, image_resource, run) or file: an-artifact/task.yml (line 10)',
    )
  })

  it("accepts a task with a file and no config: the file is checked when the run reads it", () => {
    expect(parseYamlPipeline(base("  - task: unit\n    file: repo/ci/unit.yml\n")).jobs[0]?.plan[1]).toMatchObject({
      kind: "task",
      file: "repo/ci/unit.yml",
    })
  })

  it("refuses a task with both config and file", () => {
    expect(messageOf(base("  - task: unit\n    file: a/b.yml\n    config: {platform: linux, run: {path: sh}}\n"))).toBe(
      'jobs[0].plan[1].task: task "unit" has both config and file; keep one (line 8)',
    )
  })

  it("refuses a task config without platform", () => {
    expect(messageOf(base("  - task: unit\n    config:\n      run: {path: sh}\n"))).toBe(
      "jobs[0].plan[1].config: the task config needs a platform, for example platform: linux (line 9)",
    )
  })

  it("refuses a task config without run", () => {
    expect(messageOf(base("  - task: unit\n    config: {platform: linux}\n"))).toBe(
      'jobs[0].plan[1].config: the task config needs run: with a path, for example run: {path: sh, args: [-c, "make test"]} (line 9)',
    )
  })

  it("refuses a registry image without a repository, and a tag that is not a string", () => {
    const error = errorOf(
      base(`  - task: unit
    config:
      platform: linux
      image_resource: {type: registry-image, source: {tag: 3.10}}
      run: {path: sh}
`),
    )
    expect(error.problems).toEqual([
      {
        path: "jobs[0].plan[1].config.image_resource.source",
        line: 11,
        message: "source needs the image's repository, for example repository: busybox",
      },
      {
        path: "jobs[0].plan[1].config.image_resource.source.tag",
        line: 11,
        message: "must be a string, not the number 3.1; put the value in quotes",
      },
    ])
  })

  it("reads a gate step with its message, approvers and timeout, and refuses a malformed one", () => {
    const plan = parseYamlPipeline(
      base("  - gate: prod\n    message: ship?\n    timeout: 1h\n    approvers: '\"release\" in Groups'\n"),
    ).jobs[0]?.plan
    expect(plan?.[1]).toMatchObject({
      kind: "gate",
      name: "prod",
      message: "ship?",
      timeout: "1h",
      approvers: '"release" in Groups',
    })
    expect(messageOf(base("  - gate: prod\n    message: 5\n"))).toMatch(
      /^jobs\[0\]\.plan\[1\]\.message: must be a string/,
    )
    expect(messageOf(base("  - gate: prod\n    mesage: hi\n"))).toMatch(
      /unknown key "mesage" in a gate step; did you mean "message"\?/,
    )
    expect(messageOf(base("  - gate: prod\n    timeout: soon\n"))).toMatch(/timeout/)
  })

  it("refuses a step without a kind, with a typo of one, or with two", () => {
    expect(messageOf(base("  - timeout: 5m\n"))).toBe(
      "jobs[0].plan[1]: a step needs one of task, get, put, load_var, set_pipeline, gate, do, try, in_parallel (line 8)",
    )
    expect(messageOf(base("  - taks: unit\n"))).toBe(
      'jobs[0].plan[1].taks: unknown key "taks" in a step; did you mean "task"? (line 8)',
    )
    expect(messageOf(base("  - task: unit\n    get: repo\n    file: a/b.yml\n"))).toBe(
      "jobs[0].plan[1]: a step has both task and get; write them as two steps (line 8)",
    )
    expect(messageOf(base("  - aggregate: []\n"))).toBe(
      "jobs[0].plan[1].aggregate: aggregate was removed in Concourse 7; use in_parallel (line 8)",
    )
  })

  it("checks modifiers: attempts, timeout, max_in_flight", () => {
    const error = errorOf(
      base(`  - get: repo
    attempts: 0
    timeout: 5 minutes
  - task: t
    file: a/b.yml
    across:
    - var: os
      values: linux
      max_in_flight: some
`),
    )
    expect(error.problems.map((problem) => `${problem.path} (${problem.line}): ${problem.message}`)).toEqual([
      "jobs[0].plan[1].attempts (9): must be a whole number of at least 1, not the number 0",
      'jobs[0].plan[1].timeout (10): invalid duration "5 minutes"; write a number with a unit (ms, s, m, h), for example 250ms, 5s or 1m30s',
      'jobs[0].plan[2].across[0].values (15): must be a list of values or a ((variable)) holding one, not the string "linux"',
      'jobs[0].plan[2].across[0].max_in_flight (16): must be a whole number of at least 1, not the string "some"',
    ])
  })

  it("checks schedules as the scheduler reads them, and a written-out interval of at least a second", () => {
    const job = (schedule: string) => base(`  triggers:\n    schedule: ${schedule}\n`)
    expect(messageOf(job('{cron: "61 * * * *"}'))).toBe(
      'jobs[0].triggers.schedule.cron: invalid cron expression "61 * * * *": Constraint error, got value 61 expected range 0-59 (line 9)',
    )
    expect(messageOf(job('{cron: "* * *"}'))).toBe(
      'jobs[0].triggers.schedule.cron: invalid cron expression "* * *": it has 3 fields; write 5 (minute hour day-of-month month day-of-week), 6 with seconds first, or a shorthand such as @hourly (line 9)',
    )
    expect(messageOf(job('{cron: "0 9 * * *", timezone: Mars/Base}'))).toBe(
      'jobs[0].triggers.schedule.cron: unknown time zone "Mars/Base"; use an IANA name such as "UTC" or "Europe/Paris" (line 9)',
    )
    for (const fine of ['{cron: "*/5 * * * * *"}', "{cron: '@hourly'}", '{cron: "CRON_TZ=Europe/Paris 0 9 * * *"}']) {
      expect(() => parseYamlPipeline(job(fine))).not.toThrow()
    }
    expect(messageOf(job("{every: 500ms}"))).toBe("jobs[0].triggers.schedule.every: must be at least 1s (line 9)")
    expect(messageOf(job("{every: ((interval))}"))).toBe(
      "jobs[0].triggers.schedule.every: must be written out: a variable is not allowed here (line 9)",
    )
    expect(messageOf(job("{cron: '* * * * *', every: 1m}"))).toBe(
      "jobs[0].triggers.schedule: a schedule has either cron or every, not both (line 9)",
    )
  })

  it("checks set_pipeline targets and refuses Concourse features runnel lacks", () => {
    expect(messageOf(base("  - set_pipeline: My_Pipeline\n    file: repo/p.yml\n"))).toBe(
      'jobs[0].plan[1].set_pipeline: "My_Pipeline" is not a pipeline name; use self, or lowercase letters, digits, "-" and ".", starting and ending with a letter or digit, at most 63 characters (line 8)',
    )
    expect(messageOf(base("  - set_pipeline: other\n    file: repo/p.yml\n    team: main\n"))).toBe(
      "jobs[0].plan[1].team: set_pipeline into another team is not supported: runnel has no teams (line 10)",
    )
  })

  it("refuses var sources other than dummy", () => {
    expect(messageOf(`var_sources:\n- name: v\n  type: vault\n${base("")}`)).toBe(
      'var_sources[0].type: var sources of type "vault" are not supported; runnel supports type: dummy (line 3)',
    )
  })

  it("refuses a group naming an unknown job, but not a glob", () => {
    expect(messageOf(`groups:\n- name: g\n  jobs: [build, "test-*", tset]\n${base("")}`)).toBe(
      'groups[0].jobs[2]: job "tset" is not defined (line 3)',
    )
  })

  it("refuses names that would break task paths", () => {
    expect(messageOf(base("  - task: a/b\n    file: x/y.yml\n"))).toBe(
      'jobs[0].plan[1].task: the task name "a/b" must not contain "/": names become part of task paths (line 8)',
    )
  })

  it("lists problems by line, the first ten in the message and all in problems", () => {
    const steps = Array.from({ length: 12 }, (_, i) => `  - get: repo\n    attempts: -${i + 1}\n`).join("")
    const error = errorOf(base(steps))
    expect(error.problems).toHaveLength(12)
    expect(error.status).toBe(400)
    expect(error.code).toBe("invalid_yaml")
    const lines = error.message.split("\n")
    expect(lines[0]).toBe("the pipeline has 12 problems:")
    expect(lines[1]).toBe(
      "- jobs[0].plan[1].attempts: must be a whole number of at least 1, not the number -1 (line 9)",
    )
    expect(lines).toHaveLength(12)
    expect(lines[11]).toBe("- and 2 more")
  })

  it("refuses an empty document and one that is not a mapping", () => {
    expect(messageOf("")).toBe(
      "the pipeline is empty; it needs jobs:, for example jobs: [{name: build, plan: [...]}] (line 1)",
    )
    expect(messageOf("- a\n- b\n")).toBe("the pipeline must be a mapping, not a list (line 1)")
    expect(messageOf("resources: []\n")).toBe("the pipeline has no jobs; add jobs: with at least one job (line 1)")
  })
})
