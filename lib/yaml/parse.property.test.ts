import { readFileSync } from "node:fs"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { parseTaskConfigFile, parseYamlPipeline } from "./parse.ts"
import { YamlPipelineError } from "./yaml-pipeline-error.ts"

const full = readFileSync(new URL("testdata/full.yml", import.meta.url), "utf8")

/** Runs `parse` and says how it ended; anything but success or a YamlPipelineError fails the property. */
function outcome(parse: () => unknown): "accepted" | "refused" {
  const started = performance.now()
  try {
    parse()
    return "accepted"
  } catch (error) {
    if (!(error instanceof YamlPipelineError)) throw error
    expect(error.problems.length).toBeGreaterThan(0)
    for (const problem of error.problems) expect(problem.line).toBeGreaterThanOrEqual(0)
    return "refused"
  } finally {
    expect(performance.now() - started).toBeLessThan(2000)
  }
}

// Pieces of YAML and of pipelines, so random text often gets deep before it goes wrong.
const token = fc.constantFrom(
  "jobs:",
  "resources:",
  "- ",
  "name: ",
  "plan:",
  "task: ",
  "get: ",
  "put: ",
  "config:",
  "platform: linux",
  "run: {path: sh}",
  "file: a/b.yml",
  "in_parallel:",
  "do:",
  "try:",
  "across:",
  "passed: [",
  "on_success:",
  "timeout: 5m",
  "attempts: ",
  "((var))",
  "((.:x))",
  "&a ",
  "*a",
  "<<: ",
  "[",
  "]",
  "{",
  "}",
  ",",
  ": ",
  "'",
  '"',
  "#",
  "|",
  ">-",
  "---",
  "? ",
  "!!binary ",
  "!!set ",
  "!custom ",
  "~",
  "__proto__",
  "\t",
  "\n",
  "\n  ",
  "\n    ",
  " ",
  "0",
  "-1",
  "1e999",
  ".inf",
  "yes",
  "%YAML 1.2\n",
  "\u0000",
  "\uFEFF",
)
const yamlish = fc
  .array(fc.oneof({ weight: 4, arbitrary: token }, { weight: 1, arbitrary: fc.string() }), {
    maxLength: 60,
  })
  .map((parts) => parts.join(""))

describe("parsing arbitrary text", () => {
  it("only ever throws YamlPipelineError, and quickly", () => {
    fc.assert(
      fc.property(yamlish, (text) => {
        outcome(() => parseYamlPipeline(text))
        outcome(() => parseTaskConfigFile(text, "task.yml"))
      }),
      { numRuns: 1500 },
    )
  })

  it("survives a valid pipeline with random edits", () => {
    const edit = fc.tuple(
      fc.nat({ max: full.length }),
      fc.nat({ max: 20 }),
      fc.oneof(token, fc.string({ maxLength: 5 })),
    )
    fc.assert(
      fc.property(fc.array(edit, { minLength: 1, maxLength: 5 }), (edits) => {
        let text = full
        for (const [at, remove, insert] of edits) text = text.slice(0, at) + insert + text.slice(at + remove)
        outcome(() => parseYamlPipeline(text))
      }),
      { numRuns: 500 },
    )
  })

  it("accepts the unedited pipeline", () => {
    expect(outcome(() => parseYamlPipeline(full))).toBe("accepted")
  })
})
