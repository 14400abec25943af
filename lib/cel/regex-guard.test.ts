import { describe, expect, it } from "vitest"
import { cpuMsOf } from "./cpu-time.fixture.ts"
import { cachedPattern, checkPattern, maxMatchInputChars, maxPatternChars } from "./regex-guard.ts"

const refused: [string, RegExp][] = [
  ["(a+)+", /holds another repeat/],
  ["(a*)*", /holds another repeat/],
  ["(a+)*$", /holds another repeat/],
  ["(\\w+\\s?)+$", /holds another repeat/],
  ["(.*,)+", /holds another repeat/],
  ["(x+x+)+y", /holds another repeat/],
  ["((ab)+)+", /holds another repeat/],
  ["(a|a)*", /alternatives/],
  ["(a|ab)*c", /alternatives/],
  ["(\\w|\\d)+", /alternatives/],
  ["((a|a)b)+", /alternatives/],
  ["(?i)(a|A)+", /alternatives/],
  ["(a)\\1", /backreferences/],
  ["(?<x>a)\\k<x>", /backreferences/],
  ["(?=a)b", /lookahead/],
  ["a(?!b)", /lookahead/],
  ["(?<=a)b", /lookahead/],
  [".*a.*b", /polynomial/],
  ["\\d+\\d+", /polynomial/],
  ["^.*foo.*$", /polynomial/],
  ["\\s*\\s*x", /polynomial/],
  ["[", /not a valid regular expression/],
  ["a{2,1}", /not a valid regular expression/],
  ["\\z", /not a valid regular expression/],
  ["(?i", /not a valid regular expression/],
  // RE2's POSIX classes: refused rather than misread as a class of ":[ahlp" and a literal "]".
  ["[[:alpha:]]", /not a valid regular expression/],
]
const accepted = [
  "^deploy-",
  "@corp\\.example$",
  ".*@corp\\.example$",
  "^[a-z]+@[a-z]+\\.com$",
  "^[^@]+@[^@]+$",
  "(\\d{1,3}\\.){3}\\d{1,3}",
  "^([a-z0-9-]+\\.)+example\\.com$",
  "(foo|bar)+",
  "^refs/heads/(main|release-.+)$",
  "^v\\d+\\.\\d+\\.\\d+$",
  "(?i)^deploy",
  "(?P<branch>main)",
  "a{2,}b{1,}",
  "\\p{L}+",
  "😀+",
]

describe("checkPattern", () => {
  it.each(refused)("refuses %s", (pattern, reason) => {
    const verdict = checkPattern(pattern)
    expect(verdict.ok).toBe(false)
    if (!verdict.ok) expect(verdict.reason).toMatch(reason)
  })

  it.each(accepted)("accepts %s", (pattern) => {
    expect(checkPattern(pattern)).toMatchObject({ ok: true })
  })

  it("turns RE2's leading flags into JavaScript flags", () => {
    const verdict = checkPattern("(?is)^a.b")
    expect(verdict.ok && verdict.regexp.flags).toBe("isu")
    expect(verdict.ok && verdict.regexp.test("A\nB")).toBe(true)
  })

  it("matches code points, as CEL does", () => {
    const verdict = checkPattern("^.$")
    expect(verdict.ok && verdict.regexp.test("😀")).toBe(true)
  })

  it("refuses a pattern longer than the limit", () => {
    expect(checkPattern("a".repeat(maxPatternChars + 1))).toMatchObject({ ok: false })
  })

  it("caches verdicts", () => {
    expect(cachedPattern("^cached$")).toBe(cachedPattern("^cached$"))
  })

  it("keeps accepted patterns fast on hostile input of the longest allowed length", () => {
    const inputs = ["a", "x", "1", " ", "a.", "@", "-"].map((unit) =>
      unit.repeat(Math.ceil(maxMatchInputChars / unit.length)).slice(0, maxMatchInputChars),
    )
    for (const pattern of accepted) {
      const verdict = checkPattern(pattern)
      if (!verdict.ok) continue
      for (const input of inputs) {
        const cpuMs = cpuMsOf(() => verdict.regexp.test(`${input}!`))
        expect(cpuMs, `${pattern} on ${input.slice(0, 4)}…`).toBeLessThan(250)
      }
    }
  })
})
