import { describe, expect, it } from "vitest"
import { digestMatches, hmacSha256 } from "./signature.ts"

describe("signature helpers", () => {
  it("match a hex digest in either case and nothing of another length", () => {
    const digest = hmacSha256("k", "body")
    const hex = digest.toString("hex")
    expect(digestMatches(hex, digest)).toBe(true)
    expect(digestMatches(hex.toUpperCase(), digest)).toBe(true)
    expect(digestMatches(hex.slice(2), digest)).toBe(false)
    expect(digestMatches(`${hex}00`, digest)).toBe(false)
    expect(digestMatches(`${hex.slice(0, 62)}zz`, digest)).toBe(false)
  })
})
