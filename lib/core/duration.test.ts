import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { formatDuration, parseDuration } from "./duration.ts"

describe("durations", () => {
  it("are written as Go writes them, to the millisecond", () => {
    expect(formatDuration(0)).toBe("0s")
    expect(formatDuration(250)).toBe("250ms")
    expect(formatDuration(4500)).toBe("4.5s")
    expect(formatDuration(90_250)).toBe("1m30.25s")
    expect(formatDuration(5 * 60_000)).toBe("5m0s")
    expect(formatDuration(7 * 60_000 + 12_000)).toBe("7m12s")
    expect(formatDuration(2 * 3_600_000 + 5000)).toBe("2h0m5s")
    expect(formatDuration(26 * 3_600_000)).toBe("26h0m0s")
  })

  it("are written as 0s when negative, and rounded to the millisecond", () => {
    expect(formatDuration(-5000)).toBe("0s")
    expect(formatDuration(1500.4)).toBe("1.5s")
  })

  it("read back to the milliseconds they were written from", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 400 * 3_600_000 }), (ms) => parseDuration(formatDuration(ms)) === ms),
    )
  })

  it("refuse text that is not a duration, with an example", () => {
    expect(() => parseDuration("5 minutes")).toThrow(
      'invalid duration "5 minutes"; write a number with a unit (ms, s, m, h), for example 250ms, 5s or 1m30s',
    )
  })
})
