import { describe, expect, it } from "vitest"
import { digestMatches, formatDuration, hmacSha256, tokenMatches } from "./signature.ts"

describe("signature helpers", () => {
  it("write durations the way runnel's flags do", () => {
    expect(formatDuration(0)).toBe("0s")
    expect(formatDuration(250)).toBe("250ms")
    expect(formatDuration(5 * 60_000)).toBe("5m")
    expect(formatDuration(7 * 60_000 + 12_000)).toBe("7m12s")
    expect(formatDuration(26 * 3_600_000)).toBe("1d2h")
  })

  it("match a hex digest in either case and nothing of another length", () => {
    const digest = hmacSha256("k", "body")
    const hex = digest.toString("hex")
    expect(digestMatches(hex, digest)).toBe(true)
    expect(digestMatches(hex.toUpperCase(), digest)).toBe(true)
    expect(digestMatches(hex.slice(2), digest)).toBe(false)
    expect(digestMatches(`${hex}00`, digest)).toBe(false)
    expect(digestMatches(`${hex.slice(0, 62)}zz`, digest)).toBe(false)
  })

  it("compare plain tokens of any lengths", () => {
    expect(tokenMatches("secret", "secret")).toBe(true)
    expect(tokenMatches("secre", "secret")).toBe(false)
    expect(tokenMatches("", "secret")).toBe(false)
    expect(tokenMatches("sécret", "sécret")).toBe(true)
  })
})
