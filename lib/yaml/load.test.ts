import { describe, expect, it } from "vitest"
import { maxStepDepth, parseYamlPipeline } from "./parse.ts"
import { YamlPipelineError } from "./yaml-pipeline-error.ts"

function messageOf(text: string): string {
  try {
    parseYamlPipeline(text)
  } catch (error) {
    if (error instanceof YamlPipelineError) return error.message
    throw error
  }
  throw new Error("the pipeline was accepted")
}

const job = (plan: string) => `jobs:\n- name: a\n  plan:\n${plan}`

describe("reading YAML text", () => {
  it("refuses a tab used as indentation, saying to use spaces", () => {
    expect(messageOf("jobs:\n- name: a\n  plan:\n\t- get: repo\n")).toBe(
      "jobs: a tab indents this line; YAML indents with spaces only, so replace the tab with spaces (line 4)",
    )
  })

  it("accepts tabs inside values, such as a script", () => {
    const pipeline = parseYamlPipeline(
      job('  - task: t\n    config:\n      platform: linux\n      run: {path: sh, args: ["-c", "printf \'a\\tb\'"]}\n'),
    )
    expect(pipeline.jobs[0]?.plan[0]).toMatchObject({ config: { run: { args: ["-c", "printf 'a\tb'"] } } })
  })

  it("refuses a duplicate key, naming it and its path", () => {
    expect(messageOf("jobs:\n- name: a\n  plan: []\n  name: b\n")).toBe(
      'jobs[0].name: the key "name" appears more than once in the same mapping; keep one (line 4)',
    )
  })

  it("refuses keys that differ in YAML but are the same string", () => {
    expect(messageOf(job('  - get: r\n    params: {1: a, "1": b}\n'))).toBe(
      'jobs[0].plan[0].params["1"]: the key "1" appears more than once in the same mapping; keep one (line 5)',
    )
  })

  it("refuses more than one document", () => {
    expect(messageOf("jobs: []\n---\njobs: []\n")).toBe(
      "the file holds more than one YAML document (a second `---`); a pipeline is a single document (line 2)",
    )
  })

  it("reports other syntax errors with their line", () => {
    expect(messageOf('jobs:\n- name: "a\n')).toBe('invalid YAML: Missing closing "quote (line 3)')
    expect(messageOf("jobs: [a, b\nx: 1\n")).toMatch(/invalid YAML: Flow sequence .* \(line 2\)$/)
  })

  it("accepts anchors, aliases and merge keys, as Concourse does", () => {
    const text = `resources:
- name: repo
  type: git
shared:
jobs:
- name: a
  plan:
  - get: repo
  - &unit
    task: unit
    file: repo/unit.yml
    params: &params {A: "1"}
- name: b
  plan:
  - get: repo
  - *unit
  - task: lint
    file: repo/lint.yml
    params: {<<: *params, B: "2"}
`.replace("shared:\n", "")
    const pipeline = parseYamlPipeline(text)
    expect(pipeline.jobs[1]?.plan[1]).toMatchObject({ kind: "task", name: "unit", params: { A: "1" } })
    expect(pipeline.jobs[1]?.plan[2]).toMatchObject({ params: { A: "1", B: "2" } })
  })

  it("refuses an alias without an anchor before it", () => {
    expect(messageOf(job("  - *nope\n"))).toBe(
      "jobs[0].plan[0]: the alias *nope has no anchor &nope before it (line 4)",
    )
  })

  it("refuses an alias inside the value it names", () => {
    expect(messageOf(job("  - &loop\n    do: [*loop]\n"))).toBe(
      "jobs[0].plan[0].do[0]: the alias *loop refers to a value that contains it (line 5)",
    )
  })

  it("refuses an alias bomb at the alias that sets it off, quickly", () => {
    const levels = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for (const name of "bcdefgh") {
      const previous = String.fromCharCode(name.charCodeAt(0) - 1)
      levels.push(`${name}: &${name} [${Array(10).fill(`*${previous}`).join(", ")}]`)
    }
    const started = Date.now()
    const message = messageOf(`${levels.join("\n")}\njobs: *h\n`)
    expect(Date.now() - started).toBeLessThan(5000)
    expect(message).toMatch(
      /^e\[\d+\]: aliases expand to more than 100000 values, which looks like an alias bomb; .* \(line 5\)$/,
    )
  })

  it("refuses a document over 1 MiB before parsing it", () => {
    const text = `jobs: []\n# ${"x".repeat(1 << 20)}\n`
    expect(messageOf(text)).toBe("the document is 1.0 MiB; the limit is 1 MiB")
  })

  it("measures the limit in bytes, not characters", () => {
    const text = `jobs: []\n# ${"é".repeat(600_000)}\n`
    expect(messageOf(text)).toBe("the document is 1.1 MiB; the limit is 1 MiB")
  })

  it("refuses steps nested deeper than the limit, at the step that crosses it", () => {
    const nested = (depth: number) => {
      let step = "{task: t, file: a/b.yml}"
      for (let level = 1; level < depth; level++) step = `{try: ${step}}`
      return job(`  - ${step}\n`)
    }
    expect(parseYamlPipeline(nested(maxStepDepth)).jobs).toHaveLength(1)
    const message = messageOf(nested(maxStepDepth + 1))
    expect(message).toMatch(
      /^jobs\[0\]\.plan\[0\](\.try){3}.*…(\.try)+: steps nest more than 64 levels deep; flatten the plan \(line 4\)$/,
    )
  })

  it("refuses values nested too deeply", () => {
    const params = `${"{a: ".repeat(300)}1${"}".repeat(300)}`
    expect(messageOf(job(`  - task: t\n    file: a/b.yml\n    params: ${params}\n`))).toMatch(
      /: values nest more than 256 levels deep \(line 6\)$/,
    )
  })

  it("refuses a megabyte of opening brackets without parsing it", () => {
    const started = Date.now()
    expect(messageOf(`jobs: ${"[".repeat(1_000_000)}`)).toBe(
      "brackets ([ and {) nest more than 1000 levels deep (line 1)",
    )
    expect(Date.now() - started).toBeLessThan(1000)
  })

  it("refuses a deep block structure without overflowing the stack", () => {
    const text = `jobs:\n${"- ".repeat(5000)}x\n`
    expect(messageOf(text)).toMatch(/(nest more than 256 levels deep|nests too deeply)/)
  })

  it("keeps a __proto__ key as data", () => {
    const pipeline = parseYamlPipeline(
      job("  - task: t\n    file: a/b.yml\n    params: {__proto__: {polluted: true}}\n"),
    )
    const step = pipeline.jobs[0]?.plan[0]
    const params = step?.kind === "task" ? step.params : {}
    expect(Object.getPrototypeOf(params)).toBe(Object.prototype)
    expect(Object.keys(params)).toEqual(["__proto__"])
    expect(({} as Record<string, unknown>).polluted).toBeUndefined()
  })
})
