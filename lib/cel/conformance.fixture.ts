/**
 * Runs CEL specification conformance cases (google/cel-spec tests/simple,
 * converted to JSON; format in testdata/README.md) against
 * @marcbachmann/cel-js itself, to know which parts of CEL it gets right.
 * Used by conformance.test.ts; `node lib/cel/conformance.fixture.ts <corpus.json>`
 * prints pass rates per section.
 */
import { isDeepStrictEqual } from "node:util"
import { Environment } from "@marcbachmann/cel-js"

export type ConformanceCase = {
  id: string
  section: string
  name: string
  expr: string
  bindings?: Record<string, unknown>
  expect: { value: unknown } | { error: true }
  decls?: Record<string, string>
  disable_check?: boolean
  container?: string
}

export type ConformanceResult = { pass: boolean; detail: string }

/** Decodes the corpus encoding ({"int": "5"}, {"double": 1.5}, {"map": {...}}) to cel-js values. */
export function decodeValue(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(decodeValue)
  if (value === null || typeof value !== "object") return value
  const entries = Object.entries(value)
  if (entries.length === 1) {
    const [key, inner] = entries[0] ?? []
    if (key === "int") return BigInt(inner as string)
    if (key === "double") return typeof inner === "string" ? Number(inner === "-0" ? -0 : inner) : inner
    if (key === "map") return Object.fromEntries(Object.entries(inner as object).map(([k, v]) => [k, decodeValue(v)]))
  }
  return Object.fromEntries(entries.map(([k, v]) => [k, decodeValue(v)]))
}

/** cel-js values to plain data: Maps to objects, so results compare with decoded expectations. */
function plain(value: unknown): unknown {
  if (value instanceof Map) return Object.fromEntries([...value].map(([k, v]) => [String(k), plain(v)]))
  if (Array.isArray(value)) return value.map(plain)
  if (value !== null && typeof value === "object" && Object.getPrototypeOf(value) === Object.prototype) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, plain(v)]))
  }
  return value
}

const celType = (type: string) => type.replaceAll("(", "<").replaceAll(")", ">")

export function runConformanceCase(testCase: ConformanceCase): ConformanceResult {
  let result: unknown
  try {
    const env = new Environment({
      unlistedVariablesAreDyn: testCase.decls === undefined,
      homogeneousAggregateLiterals: false,
    })
    for (const [name, type] of Object.entries(testCase.decls ?? {})) env.registerVariable(name, celType(type))
    const bindings = Object.fromEntries(Object.entries(testCase.bindings ?? {}).map(([k, v]) => [k, decodeValue(v)]))
    result = env.evaluate(testCase.expr, bindings)
  } catch (error) {
    if ("error" in testCase.expect) return { pass: true, detail: "error as expected" }
    return { pass: false, detail: `threw ${error instanceof Error ? error.message.split("\n")[0] : String(error)}` }
  }
  if ("error" in testCase.expect) return { pass: false, detail: `expected an error, got ${String(result)}` }
  const expected = decodeValue(testCase.expect.value)
  const got = plain(result)
  if (isDeepStrictEqual(got, expected)) return { pass: true, detail: "value as expected" }
  return { pass: false, detail: `expected ${show(expected)}, got ${show(got)}` }
}

function show(value: unknown): string {
  return JSON.stringify(value, (_key, v) => (typeof v === "bigint" ? `${v}n` : v)) ?? String(value)
}

export type SectionFigures = { section: string; cases: number; passed: number }

export function conformanceFigures(cases: readonly ConformanceCase[]): SectionFigures[] {
  const bySection = new Map<string, SectionFigures>()
  for (const testCase of cases) {
    const figures = bySection.get(testCase.section) ?? { section: testCase.section, cases: 0, passed: 0 }
    figures.cases++
    if (runConformanceCase(testCase).pass) figures.passed++
    bySection.set(testCase.section, figures)
  }
  return [...bySection.values()]
}

if (import.meta.main) {
  const { readFileSync } = await import("node:fs")
  const path =
    process.argv.slice(2).find((arg) => !arg.startsWith("--")) ??
    new URL("testdata/cel-conformance-core.json", import.meta.url).pathname
  const cases = (JSON.parse(readFileSync(path, "utf8")) as { cases: ConformanceCase[] }).cases
  let passed = 0
  for (const figures of conformanceFigures(cases)) {
    passed += figures.passed
    const rate = ((100 * figures.passed) / figures.cases).toFixed(0)
    console.log(`${figures.section.padEnd(12)} ${figures.passed}/${figures.cases} (${rate}%)`)
  }
  console.log(`${"total".padEnd(12)} ${passed}/${cases.length} (${((100 * passed) / cases.length).toFixed(1)}%)`)
  if (process.argv.includes("--failures")) {
    for (const testCase of cases) {
      const result = runConformanceCase(testCase)
      if (!result.pass) console.log(`${testCase.id}\t${testCase.expr}\t${result.detail}`)
    }
  }
}
