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
