import { describe, expect, it } from "vitest"
import { cronParts, scheduleTimes } from "./schedule-times.ts"

const at = (iso: string) => Date.parse(iso)
const iso = (ms: number | undefined) => (ms === undefined ? undefined : new Date(ms).toISOString())

describe("a schedule's ticks", () => {
  it("counts an interval's ticks from its anchor, a tick at the instant being the latest", () => {
    const times = scheduleTimes("interval", "2s", { anchorMs: at("2026-01-01T00:00:01Z") })
    expect(iso(times.next(at("2026-01-01T00:00:01Z")))).toBe("2026-01-01T00:00:03.000Z")
    expect(iso(times.next(at("2026-01-01T00:00:04.500Z")))).toBe("2026-01-01T00:00:05.000Z")
    expect(iso(times.latest(at("2026-01-01T00:00:05Z")))).toBe("2026-01-01T00:00:05.000Z")
    expect(iso(times.latest(at("2026-01-01T00:00:04.999Z")))).toBe("2026-01-01T00:00:03.000Z")
    expect(times.latest(at("2026-01-01T00:00:00Z"))).toBeUndefined()
  })

  it("reads five fields, six with seconds, and shorthands, in UTC unless told a zone", () => {
    const from = at("2026-03-10T08:59:58Z")
    expect(iso(scheduleTimes("cron", "0 9 * * *").next(from))).toBe("2026-03-10T09:00:00.000Z")
    expect(iso(scheduleTimes("cron", "*/5 * * * * *").next(from))).toBe("2026-03-10T09:00:00.000Z")
    expect(iso(scheduleTimes("cron", "@hourly").next(from))).toBe("2026-03-10T09:00:00.000Z")
    expect(iso(scheduleTimes("cron", "0 9 * * *", { timeZone: "Europe/Paris" }).next(from))).toBe(
      "2026-03-11T08:00:00.000Z",
    )
    expect(iso(scheduleTimes("cron", "CRON_TZ=America/New_York 0 9 * * *").latest(from))).toBe(
      "2026-03-09T13:00:00.000Z",
    )
    expect(iso(scheduleTimes("cron", "0 9 * * *").latest(at("2026-03-10T09:00:00Z")))).toBe("2026-03-10T09:00:00.000Z")
  })

  it("follows the zone across a daylight-saving change", () => {
    // Paris moves from UTC+1 to UTC+2 on 2026-03-29: 09:00 local is 08:00 UTC before and 07:00 UTC after.
    const times = scheduleTimes("cron", "0 9 * * *", { timeZone: "Europe/Paris" })
    expect(iso(times.next(at("2026-03-28T00:00:00Z")))).toBe("2026-03-28T08:00:00.000Z")
    expect(iso(times.next(at("2026-03-28T09:00:00Z")))).toBe("2026-03-29T07:00:00.000Z")
  })

  it("refuses what it cannot read with the parser's message, a bad zone, and intervals under a second", () => {
    expect(() => scheduleTimes("cron", "61 * * * *")).toThrow(
      'invalid cron expression "61 * * * *": Constraint error, got value 61 expected range 0-59',
    )
    expect(() => scheduleTimes("cron", "* * *")).toThrow("it has 3 fields")
    expect(() => scheduleTimes("cron", "0 9 * * *", { timeZone: "Mars/Base" })).toThrow('unknown time zone "Mars/Base"')
    expect(() => scheduleTimes("interval", "500ms")).toThrow('interval "500ms" is shorter than one second')
    expect(() => scheduleTimes("interval", "soon")).toThrow('invalid duration "soon"')
    expect(() => cronParts("CRON_TZ=UTC 0 9 * * *", "Europe/Paris")).toThrow("give one")
  })
})
