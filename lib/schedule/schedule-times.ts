import { CronExpressionParser } from "cron-parser"
import { parseDuration } from "../core/duration.ts"
import { badRequest } from "../core/errors.ts"

/** `cron` (a cron expression) or `interval` (a Go-style duration), as a Schedule's `spec.type` says. */
export type ScheduleType = "cron" | "interval"

/**
 * The ticks of one schedule: the instants it is due. Both kinds answer the
 * same two questions, so that whoever fires a schedule (the operator's timer,
 * `runnel schedule fire`) and whoever shows it agree on every due time.
 * - Ticks are whole instants in milliseconds; the same schedule always has the
 *   same ticks, so a Run named after its tick is named the same by everyone.
 * - `next(after)` is the first tick strictly after `after`.
 * - `latest(atOrBefore)` is the last tick at or before it, or undefined when
 *   there is none (an interval before its anchor).
 */
export type ScheduleTimes = {
  next(afterMs: number): number
  latest(atOrBeforeMs: number): number | undefined
}

/** The shortest interval a schedule may have: below it, a schedule would be a busy loop. */
export const minimumIntervalMs = 1000

/**
 * A cron expression split into what cron-parser reads and its time zone:
 * `CRON_TZ=Europe/Paris 0 9 * * *` (the prefix Kubernetes' CronJob once took
 * and robfig/cron takes), or `timeZone` given beside it; UTC when neither.
 */
export function cronParts(expression: string, timeZone?: string): { fields: string; timeZone: string } {
  const trimmed = expression.trim()
  const prefix = /^(?:CRON_TZ|TZ)=(\S+)\s+(.*)$/.exec(trimmed)
  if (prefix !== null) {
    const named = prefix[1] as string
    if (timeZone !== undefined && timeZone !== "" && timeZone !== named) {
      throw badRequest(
        `the cron expression says CRON_TZ=${named} and the schedule says time zone "${timeZone}"; give one`,
      )
    }
    return { fields: (prefix[2] as string).trim(), timeZone: named }
  }
  return { fields: trimmed, timeZone: timeZone === undefined || timeZone === "" ? "UTC" : timeZone }
}

/**
 * The ticks of a Schedule object: its ticks count from its creation, so every
 * operator and `runnel schedule fire` compute the same due times.
 */
export function scheduleTimesOf(schedule: {
  readonly spec: { readonly type: ScheduleType; readonly expression: string; readonly timeZone?: string }
  readonly metadata?: { readonly creationTimestamp?: Date | string }
}): ScheduleTimes {
  return scheduleTimes(schedule.spec.type, schedule.spec.expression, {
    timeZone: schedule.spec.timeZone,
    anchorMs: Date.parse(String(schedule.metadata?.creationTimestamp ?? "")) || 0,
  })
}

/**
 * The ticks of a schedule, or a 400 naming what is wrong: the parser's own
 * message for a cron expression (5 fields, or 6 with seconds first, or an
 * `@hourly`-style shorthand), the duration rule for an interval, which must
 * be at least one second. An interval's ticks are `anchorMs + k × interval`:
 * anchored (on the Schedule's creation), so that every reader finds the same ticks.
 */
export function scheduleTimes(
  type: ScheduleType,
  expression: string,
  options: { timeZone?: string; anchorMs?: number } = {},
): ScheduleTimes {
  if (type === "interval") return intervalTimes(expression, options.anchorMs ?? 0)
  const { fields, timeZone } = cronParts(expression, options.timeZone)
  if (!isTimeZone(timeZone)) {
    throw badRequest(`unknown time zone "${timeZone}"; use an IANA name such as "UTC" or "Europe/Paris"`)
  }
  const count = fields.split(/\s+/).length
  if (!fields.startsWith("@") && count !== 5 && count !== 6) {
    throw badRequest(
      `invalid cron expression "${expression}": it has ${count} fields; write 5 (minute hour day-of-month month day-of-week), 6 with seconds first, or a shorthand such as @hourly`,
    )
  }
  const at = (currentDate: number) => CronExpressionParser.parse(fields, { currentDate, tz: timeZone, strict: false })
  try {
    at(Date.now())
  } catch (error) {
    throw badRequest(`invalid cron expression "${expression}": ${(error as Error).message}`)
  }
  return {
    next: (afterMs) => at(afterMs).next().getTime(),
    latest(atOrBeforeMs) {
      // prev() is strictly before its start, so start a millisecond later to include a tick at the instant.
      const expression = at(atOrBeforeMs + 1)
      return expression.hasPrev() ? expression.prev().getTime() : undefined
    },
  }
}

function intervalTimes(expression: string, anchorMs: number): ScheduleTimes {
  const periodMs = parseDuration(expression)
  if (periodMs < minimumIntervalMs) {
    throw badRequest(`interval "${expression}" is shorter than one second; write 1s or more`)
  }
  return {
    next: (afterMs) => anchorMs + (Math.floor((afterMs - anchorMs) / periodMs) + 1) * periodMs,
    latest: (atOrBeforeMs) =>
      atOrBeforeMs < anchorMs ? undefined : anchorMs + Math.floor((atOrBeforeMs - anchorMs) / periodMs) * periodMs,
  }
}

function isTimeZone(name: string): boolean {
  try {
    new Intl.DateTimeFormat("en", { timeZone: name })
    return true
  } catch {
    return false
  }
}
