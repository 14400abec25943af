import { describe, expect, it } from "vitest"
import { didYouMean, editDistance } from "./did-you-mean.ts"

describe("didYouMean", () => {
  const jobKeys = ["name", "plan", "serial", "serial_groups", "max_in_flight", "on_success", "ensure"]

  it("suggests a key one typo away", () => {
    expect(didYouMean("plam", jobKeys)).toBe("plan")
    expect(didYouMean("nme", jobKeys)).toBe("name")
  })

  it("counts a swap of neighbours as one edit", () => {
    expect(didYouMean("serail", jobKeys)).toBe("serial")
    expect(editDistance("serail", "serial")).toBe(1)
  })

  it("allows two edits in longer words", () => {
    expect(didYouMean("on_sucess", jobKeys)).toBe("on_success")
    expect(didYouMean("ensur3x", jobKeys)).toBe("ensure")
  })

  it("ignores case and dashes against underscores", () => {
    expect(didYouMean("max-in-flight", jobKeys)).toBe("max_in_flight")
    expect(didYouMean("Plan", jobKeys)).toBe("plan")
  })

  it("suggests nothing when nothing is close", () => {
    expect(didYouMean("wibble", jobKeys)).toBeUndefined()
    expect(didYouMean("xy", jobKeys)).toBeUndefined()
    expect(didYouMean("plan", [])).toBeUndefined()
  })

  it("computes edit distances", () => {
    expect(editDistance("", "abc")).toBe(3)
    expect(editDistance("kitten", "sitting")).toBe(3)
    expect(editDistance("kitten", "sitting", 1)).toBe(2)
  })
})
