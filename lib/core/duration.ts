import { badRequest } from "./errors.ts"

const unitMs: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }

/** Parses a Go-style duration (`250ms`, `5s`, `1m30s`, `24h`) into milliseconds. */
export function parseDuration(text: string): number {
  const parts = /^(?:\d+(?:\.\d+)?(?:ms|s|m|h))+$/.test(text) ? text.match(/\d+(?:\.\d+)?(?:ms|s|m|h)/g) : null
  if (parts === null) {
    throw badRequest(
      `invalid duration "${text}"; write a number with a unit (ms, s, m, h), for example 250ms, 5s or 1m30s`,
    )
  }
  let total = 0
  for (const part of parts) {
    const [, amount = "0", unit = "ms"] = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/.exec(part) ?? []
    total += Number(amount) * (unitMs[unit] ?? 0)
  }
  return Math.round(total)
}

/**
 * A duration as Go's `time.Duration.String()` writes it, to the millisecond:
 * `0s`, `250ms`, `4.5s`, `1m30.25s`, `5m0s`, `2h0m5s`. This is the form of
 * `Run.status.duration` (crds/README.md), one that kubectl users know and
 * that parseDuration (and Go's time.ParseDuration) read back to the same
 * number. Negative durations are written as `0s`.
 */
export function formatDuration(ms: number): string {
  const total = Math.max(0, Math.round(ms))
  if (total === 0) return "0s"
  if (total < 1000) return `${total}ms`
  const hours = Math.floor(total / 3_600_000)
  const minutes = Math.floor((total % 3_600_000) / 60_000)
  const seconds = `${(total % 60_000) / 1000}`
  if (hours > 0) return `${hours}h${minutes}m${seconds}s`
  if (minutes > 0) return `${minutes}m${seconds}s`
  return `${seconds}s`
}
