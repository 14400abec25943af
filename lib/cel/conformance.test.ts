import { readFileSync } from "node:fs"
import { describe, expect, it } from "vitest"
import { type ConformanceCase, runConformanceCase } from "./conformance.fixture.ts"

// The CEL specification's conformance cases for the sections runnel's rules
// use (testdata/cel-conformance-core.json), run through @marcbachmann/cel-js.
// The known failures are listed by id: a regression and an unexpected fix
// both fail this test, so either way the list (and docs/decisions.md) is
// updated on purpose.
const corpus = JSON.parse(readFileSync(new URL("testdata/cel-conformance-core.json", import.meta.url), "utf8")) as {
  cases: ConformanceCase[]
}

const knownFailures: Record<string, string> = {
  "basic/functions/unbound_is_runtime_error": "threw found no matching overload for 'f_unknown(int)'",
  "logic/conditional/mixed_type": "threw Ternary branches must have the same type, got 'string' and 'int'",
  "logic/AND/short_circuit_type_left": "threw Logical operator requires bool operands, got 'int'",
  "logic/AND/short_circuit_type_right": "threw Logical operator requires bool operands, got 'string'",
  "logic/OR/short_circuit_type_left": "threw Logical operator requires bool operands, got 'int'",
  "logic/OR/short_circuit_type_right": "threw Logical operator requires bool operands, got 'string'",
  "comparisons/eq_literal/eq_bytes": "expected true, got false",
  "comparisons/eq_literal/eq_list_mixed_type_numbers": "expected true, got false",
  "comparisons/eq_literal/not_eq_list_length": "threw no such overload: list<string> == list<int>",
  "comparisons/eq_literal/eq_map_mixed_type_numbers": "expected true, got false",
  "comparisons/eq_literal/eq_mixed_types": "threw no such overload: double == int",
  "comparisons/eq_literal/eq_list_elem_mixed_types": "threw no such overload: list<int> == list<double>",
  "comparisons/ne_literal/not_ne_bytes": "expected false, got true",
  "comparisons/ne_literal/ne_mixed_types": "threw no such overload: uint != int",
  "comparisons/lt_literal/lt_bytes": "threw no such overload: bytes < bytes",
  "comparisons/lt_literal/not_lt_bytes_same": "threw no such overload: bytes < bytes",
  "comparisons/lt_literal/not_lt_bytes_width": "threw no such overload: bytes < bytes",
  "comparisons/lt_literal/not_lt_dyn_int_big_lossy_double": "expected false, got true",
  "comparisons/gt_literal/not_gt_double": "threw Unexpected token: DOT",
  "comparisons/gt_literal/gt_bytes_one": "threw no such overload: bytes > bytes",
  "comparisons/gt_literal/gt_bytes_one_to_empty": "threw no such overload: bytes > bytes",
  "comparisons/gt_literal/not_gt_bytes_sorting": "threw no such overload: bytes > bytes",
  "comparisons/gt_literal/not_gt_dyn_big_double_int": "expected false, got true",
  "comparisons/lte_literal/lte_bytes_empty": "threw no such overload: bytes <= bytes",
  "comparisons/lte_literal/not_lte_bytes_length": "threw no such overload: bytes <= bytes",
  "comparisons/lte_literal/lte_dyn_big_double_int": "expected true, got false",
  "comparisons/gte_literal/gte_bytes_to_empty": "threw no such overload: bytes >= bytes",
  "comparisons/gte_literal/not_gte_bytes_empty_to_nonempty": "threw no such overload: bytes >= bytes",
  "comparisons/gte_literal/gte_bytes_samelength": "threw no such overload: bytes >= bytes",
  "comparisons/gte_literal/gte_dyn_int_big_lossy_double": "expected true, got false",
  "comparisons/bound/null_eq_left_true": "threw Unknown type: null_type",
  "lists/index/zero_based_uint": "threw No such key: 0",
  "lists/in/uint_in_ints": "expected true, got false",
  "lists/in/uint_in_doubles": "expected true, got false",
  "lists/in/int_in_uints": "expected true, got false",
  "lists/in/double_in_uints": "expected true, got false",
  "fields/map_has/has": "threw has() invalid argument",
  "fields/map_has/has_not": "threw has() invalid argument",
  "fields/map_has/has_empty": "threw has() invalid argument",
  "fields/quoted_map_fields/field_access_slash": "threw Unexpected character: `",
  "fields/quoted_map_fields/field_access_dash": "threw Unexpected character: `",
  "fields/quoted_map_fields/field_access_dot": "threw Unexpected character: `",
  "fields/quoted_map_fields/has_field_slash": "threw Unexpected character: `",
  "fields/quoted_map_fields/has_field_dash": "threw Unexpected character: `",
  "fields/quoted_map_fields/has_field_dot": "threw Unexpected character: `",
  "fields/qualified_identifier_resolution/qualified_ident": "threw Unknown variable: a",
  "fields/qualified_identifier_resolution/map_field_select": "threw Unknown variable: a",
  "fields/qualified_identifier_resolution/qualified_identifier_resolution_unchecked": "threw Unknown variable: a",
  "fields/qualified_identifier_resolution/ident_with_longest_prefix_check": "threw Unknown variable: a",
  "fields/qualified_identifier_resolution/map_key_float": "expected an error, got 5",
  "fields/qualified_identifier_resolution/map_key_null": "expected an error, got false",
  "fields/qualified_identifier_resolution/map_value_repeat_key": "expected an error, got 3",
  "fields/qualified_identifier_resolution/map_value_repeat_key_heterogeneous": "expected an error, got 2",
  "macros/all/list_empty": "threw Operator overload 'int > int: bool' overlaps with 'double > int: bool'.",
  "macros/exists_one/map_one": "threw Variable 'foo' is not of type 'int', got 'string'",
}

describe("CEL conformance of @marcbachmann/cel-js", () => {
  const sections = [...new Set(corpus.cases.map((testCase) => testCase.section))]

  for (const section of sections) {
    it(`passes the ${section} section except the known failures`, () => {
      const cases = corpus.cases.filter((testCase) => testCase.section === section)
      const unexpected: string[] = []
      for (const testCase of cases) {
        const result = runConformanceCase(testCase)
        const known = testCase.id in knownFailures
        if (result.pass && known) unexpected.push(`${testCase.id} now passes: remove it from knownFailures`)
        if (!result.pass && !known) unexpected.push(`${testCase.id} fails: ${testCase.expr} -> ${result.detail}`)
      }
      expect(unexpected).toEqual([])
    })
  }

  it("lists only failures that are in the data", () => {
    const ids = new Set(corpus.cases.map((testCase) => testCase.id))
    expect(Object.keys(knownFailures).filter((id) => !ids.has(id))).toEqual([])
  })

  it("passes at least 90% of the core sections", () => {
    const passed = corpus.cases.length - Object.keys(knownFailures).length
    expect(passed / corpus.cases.length).toBeGreaterThanOrEqual(0.9)
  })
})
