import { describe, expect, it } from "vitest"
import { fieldsMatch, labelsMatch, parseFieldSelector, parseLabelSelector } from "./selectors.ts"

const labels = { app: "web", tier: "2", env: "prod" }
const selects = (selector: string) => labelsMatch(parseLabelSelector(selector), labels)

describe("label selectors", () => {
  it("match every operator Kubernetes has", () => {
    expect(selects("")).toBe(true)
    expect(selects("app=web,env==prod")).toBe(true)
    expect(selects("app!=web")).toBe(false)
    expect(selects("missing!=x")).toBe(true)
    expect(selects("app in (api, web)")).toBe(true)
    expect(selects("app notin (api,web)")).toBe(false)
    expect(selects("tier,!missing")).toBe(true)
    expect(selects("!app")).toBe(false)
    expect(selects("tier>1,tier<3")).toBe(true)
    expect(selects("tier>2")).toBe(false)
  })

  it("refuse malformed selectors", () => {
    expect(() => parseLabelSelector("a in ()")).toThrow()
    expect(() => parseLabelSelector("a b")).toThrow()
    expect(() => parseLabelSelector("-bad=x")).toThrow(/invalid label key/)
    expect(() => parseLabelSelector("a>b")).toThrow(/integer/)
  })
})

describe("field selectors", () => {
  it("match =, == and != on supported fields, with escapes", () => {
    const fields = { "metadata.name": "a,b", "metadata.namespace": "default" }
    expect(fieldsMatch(parseFieldSelector("metadata.name=a\\,b", ["metadata.name"]), fields)).toBe(true)
    expect(fieldsMatch(parseFieldSelector("metadata.namespace!=default", ["metadata.namespace"]), fields)).toBe(false)
  })

  it("refuse fields the kind cannot be selected by", () => {
    expect(() => parseFieldSelector("spec.x=1", ["metadata.name"])).toThrow("field label not supported: spec.x")
  })
})
