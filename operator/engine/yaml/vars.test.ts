import { describe, expect, it } from "vitest"
import { staticSecrets } from "../../../lib/secrets/secret-resolver.ts"
import { GrowingRedactor } from "./redaction.ts"
import { interpolate, parseReference, substituteGiven, type VarLookup } from "./vars.ts"

const lookup = (overrides: Partial<VarLookup> = {}): VarLookup => ({
  secrets: staticSecrets({ "a.b": "dotted", creds: '{"user": "ci", "pass": "s3cret"}' }),
  redactor: new GrowingRedactor([]),
  sources: new Map([["dummy", { "my:path": { "field.1": "one" }, plain: "p", nested: { deep: { x: 1 } } }]]),
  locals: new Map([["cfg", { tag: "v1.2.3", "with space": "s" }]]),
  ...overrides,
})

// Cases follow concourse/concourse vars/reference_test.go (ParseReference).
describe("parseReference, as Concourse's vars/reference.go reads a ((variable))", () => {
  it.each([
    ["hello", { path: "hello", fields: [] }],
    ["hello.a.b", { path: "hello", fields: ["a", "b"] }],
    ['"hello.world"."a.b"."foo:bar"', { path: "hello.world", fields: ["a.b", "foo:bar"] }],
    ['"hello.world".a."foo:bar"', { path: "hello.world", fields: ["a", "foo:bar"] }],
    ["source:hello", { source: "source", path: "hello", fields: [] }],
    ['"my:path"."field.1"."field.2"', { path: "my:path", fields: ["field.1", "field.2"] }],
    ["hello .world ", { path: "hello", fields: ["world"] }],
    ['" hello "."world "', { path: " hello ", fields: ["world "] }],
    [".:cfg.tag", { source: ".", path: "cfg", fields: ["tag"] }],
  ])("reads %s", (raw, expected) => {
    expect(parseReference(raw)).toEqual(expected)
  })

  it.each([
    ['"some-source":path', "a var source name is not quoted"],
    ["vault:.field", "it has an empty name or field"],
    ['vault:"".field', "it has an empty name or field"],
    ["vault:", "it has an empty name or field"],
    ['vault:"open', "a quote is not closed"],
  ])("refuses %s", (raw, reason) => {
    expect(() => parseReference(raw)).toThrow(`invalid variable ((${raw})): ${reason}`)
  })
})

describe("interpolate", () => {
  it("reads quoted segments from a var source, a secret and a local, with fields", async () => {
    const value = await interpolate(
      {
        source: '((dummy:"my:path"."field.1"))',
        secret: '(("a.b"))',
        field: "((creds.user))",
        local: "((.:cfg.tag))",
        deep: "((dummy:nested.deep))",
      },
      lookup(),
    )
    expect(value).toEqual({ source: "one", secret: "dotted", field: "ci", local: "v1.2.3", deep: { x: 1 } })
  })

  // concourse/concourse vars/interp.go matches a variable without spaces or
  // punctuation other than - / . : @ and quotes: shell arithmetic and sed
  // expressions that happen to hold (( and )) stay text.
  it("leaves text that is not a variable as Concourse reads one", async () => {
    const text = ["echo $((1 + 2))", "sed -e 's/START/((/' -e 's/END/))/'", '((.:cfg."with space"))']
    expect(await interpolate(text, lookup())).toEqual(text)
  })

  it("names the undefined variable, why, and the key it was used at", async () => {
    await expect(interpolate({ env: { TOKEN: "x-((nope))" } }, lookup(), "params")).rejects.toThrow(
      'undefined variable ((nope)): no secret named "nope"; set it as a pipeline or global secret (runnel runner: --secret nope=VALUE) (used in params.env.TOKEN)',
    )
    await expect(interpolate(["((.:cfg.tga))"], lookup(), "args")).rejects.toThrow(
      'undefined variable ((.:cfg.tga)): the value has no field "tga"; it has "tag", "with space" (used in args[0])',
    )
    await expect(interpolate("((vault:x))", lookup(), "source")).rejects.toThrow(
      'undefined variable ((vault:x)): the pipeline has no var source "vault"; var sources: dummy (used in source)',
    )
  })

  it("leaves other variables for set_pipeline's target, reading quoted names", () => {
    expect(substituteGiven('a ((x.y)) b (("p.q")) c ((src:z)) d ((other))', { x: { y: 1 }, "p.q": "pq" })).toBe(
      "a 1 b pq c ((src:z)) d ((other))",
    )
  })
})
