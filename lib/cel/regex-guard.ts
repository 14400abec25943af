/**
 * The guard in front of CEL's `matches`. cel-js runs `matches` on JavaScript's
 * backtracking engine, not on RE2 as other CEL implementations do, so a
 * pattern such as `(a+)+$` or `.*a.*b` can take seconds or years on a few
 * kilobytes of input, and a webhook body is input anyone can send. The guard:
 * - refuses patterns that are not valid JavaScript (`u` mode, which also
 *   refuses escapes RE2 does not know, such as `\z`);
 * - refuses backreferences and lookaround (RE2 has neither; both can backtrack);
 * - refuses a repeated group holding a repeat, unless every inner repeat is
 *   fenced by a required character it cannot match (`(\d{1,3}\.){3}` passes,
 *   `(a+)+` and `(\w+\s?)+` do not): exponential time;
 * - refuses a repeated group whose alternatives can start with the same
 *   character (`(a|ab)*`, `(\w|\d)+`): exponential time;
 * - refuses two unbounded repeats in a row that can match the same text with
 *   nothing required between them that one of them cannot match (`.*a.*b`,
 *   `\d+\d+`): polynomial time, seconds on 4 KiB;
 * - and callers bound the input (`maxMatchInputChars`), which keeps what is
 *   left (one unbounded repeat, quadratic at worst) in milliseconds.
 * The analysis is conservative: it may refuse a pattern that is in fact fast,
 * never the reverse for the shapes above. RE2's leading flags `(?i)`, `(?s)`,
 * `(?m)` become JavaScript flags and `(?P<name>` becomes `(?<name>`, so rules
 * written for other CEL tools keep working.
 */

/** Longest string `matches` looks at; a longer one is an evaluation error. */
export const maxMatchInputChars = 4096
/** Longest pattern accepted. */
export const maxPatternChars = 1024

export type PatternVerdict = { ok: true; regexp: RegExp } | { ok: false; reason: string; index: number }

/** Checks a pattern and compiles it; never throws. `index` is the offset in the pattern the reason is about. */
export function checkPattern(pattern: string): PatternVerdict {
  if (pattern.length > maxPatternChars) {
    return {
      ok: false,
      reason: `the pattern is ${pattern.length} characters long; the limit is ${maxPatternChars}`,
      index: 0,
    }
  }
  const { source, flags } = translateRe2(pattern)
  let regexp: RegExp
  try {
    regexp = new RegExp(source, flags)
  } catch (error) {
    const detail =
      error instanceof Error ? error.message.replace(/^Invalid regular expression: \/.*\/[a-z]*: /s, "") : ""
    return { ok: false, reason: `it is not a valid regular expression (${detail})`, index: 0 }
  }
  try {
    const offset = pattern.length - source.length
    const tree = new PatternParser(source, flags.includes("i") || source.includes("(?i"), flags.includes("s")).parse()
    const problem = findBacktracking(tree)
    if (problem !== undefined) return { ok: false, reason: problem.reason, index: Math.max(0, problem.index + offset) }
  } catch (error) {
    if (error instanceof Refusal) return { ok: false, reason: error.message, index: error.index }
    throw error
  }
  return { ok: true, regexp }
}

const cache = new Map<string, PatternVerdict>()
const maxCached = 512

/** checkPattern with a bounded cache, for patterns met again and again at evaluation. */
export function cachedPattern(pattern: string): PatternVerdict {
  let verdict = cache.get(pattern)
  if (verdict === undefined) {
    verdict = checkPattern(pattern)
    // Patterns computed from input could fill the cache forever; start over instead.
    if (cache.size >= maxCached) cache.clear()
    cache.set(pattern, verdict)
  }
  return verdict
}

function translateRe2(pattern: string): { source: string; flags: string } {
  let source = pattern
  let flags = "u"
  const leading = /^\(\?([ims]+)\)/.exec(source)
  if (leading !== null) {
    for (const flag of new Set(leading[1])) flags += flag
    source = source.slice(leading[0].length)
  }
  return { source: source.replaceAll("(?P<", "(?<"), flags }
}

class Refusal extends Error {
  readonly index: number
  constructor(message: string, index: number) {
    super(message)
    this.index = index
  }
}

// ---- a small parser for the JavaScript pattern syntax (already known valid) ----

type Ranges = ReadonlyArray<readonly [number, number]>
type Node =
  | { kind: "set"; set: Ranges; index: number }
  | { kind: "assert"; index: number }
  | { kind: "group"; alternatives: Node[][]; index: number }
  | { kind: "repeat"; min: number; max: number; body: Node; index: number; text: string }

const maxCodePoint = 0x10ffff
const anyChar: Ranges = [[0, maxCodePoint]]
const digit: Ranges = [[0x30, 0x39]]
const word: Ranges = [
  [0x30, 0x39],
  [0x41, 0x5a],
  [0x5f, 0x5f],
  [0x61, 0x7a],
]
const space: Ranges = normalize([
  [0x09, 0x0d],
  [0x20, 0x20],
  [0xa0, 0xa0],
  [0x1680, 0x1680],
  [0x2000, 0x200a],
  [0x2028, 0x2029],
  [0x202f, 0x202f],
  [0x205f, 0x205f],
  [0x3000, 0x3000],
  [0xfeff, 0xfeff],
])
const lineTerminators: Ranges = normalize([
  [0x0a, 0x0a],
  [0x0d, 0x0d],
  [0x2028, 0x2029],
])
/** A repeat with more than this many iterations counts as unbounded. */
const unboundedAbove = 64

function normalize(ranges: Array<readonly [number, number]>): Ranges {
  const sorted = [...ranges].sort((a, b) => a[0] - b[0])
  const merged: Array<[number, number]> = []
  for (const [low, high] of sorted) {
    const last = merged.at(-1)
    if (last !== undefined && low <= last[1] + 1) last[1] = Math.max(last[1], high)
    else merged.push([low, high])
  }
  return merged
}

function complement(ranges: Ranges): Ranges {
  const result: Array<[number, number]> = []
  let next = 0
  for (const [low, high] of ranges) {
    if (low > next) result.push([next, low - 1])
    next = high + 1
  }
  if (next <= maxCodePoint) result.push([next, maxCodePoint])
  return result
}

function intersect(a: Ranges, b: Ranges): Ranges {
  const result: Array<[number, number]> = []
  for (const [lowA, highA] of a) {
    for (const [lowB, highB] of b) {
      const low = Math.max(lowA, lowB)
      const high = Math.min(highA, highB)
      if (low <= high) result.push([low, high])
    }
  }
  return result
}

const union = (...sets: Ranges[]): Ranges => normalize(sets.flat())

function singleChar(ranges: Ranges): number | undefined {
  const only = ranges.length === 1 ? ranges[0] : undefined
  return only !== undefined && only[0] === only[1] ? only[0] : undefined
}

// ASCII case folding is enough for the overlap questions asked here.
function foldCase(ranges: Ranges): Ranges {
  const extra: Array<[number, number]> = []
  for (const [low, high] of intersect(ranges, [[0x41, 0x5a]])) extra.push([low + 32, high + 32])
  for (const [low, high] of intersect(ranges, [[0x61, 0x7a]])) extra.push([low - 32, high - 32])
  return extra.length === 0 ? ranges : normalize([...ranges, ...extra])
}

class PatternParser {
  #source: string
  #at = 0
  #ignoreCase: boolean
  #dotAll: boolean
  constructor(source: string, ignoreCase: boolean, dotAll: boolean) {
    this.#source = source
    this.#ignoreCase = ignoreCase
    this.#dotAll = dotAll
  }

  parse(): Node {
    const node = this.#alternation(0)
    if (this.#at < this.#source.length) throw new Refusal("it could not be analysed", this.#at)
    return node
  }

  #peek(): string {
    return this.#source[this.#at] ?? ""
  }

  #alternation(index: number): Node {
    const alternatives = [this.#sequence()]
    while (this.#peek() === "|") {
      this.#at++
      alternatives.push(this.#sequence())
    }
    return { kind: "group", alternatives, index }
  }

  #sequence(): Node[] {
    const items: Node[] = []
    while (this.#at < this.#source.length && this.#peek() !== "|" && this.#peek() !== ")") {
      const start = this.#at
      let node = this.#atom()
      for (;;) {
        const quantifier = this.#quantifier()
        if (quantifier === undefined) break
        node = { kind: "repeat", ...quantifier, body: node, index: start, text: this.#source.slice(start, this.#at) }
      }
      items.push(node)
    }
    return items
  }

  #quantifier(): { min: number; max: number } | undefined {
    const char = this.#peek()
    let bounds: { min: number; max: number } | undefined
    if (char === "*") bounds = { min: 0, max: Number.POSITIVE_INFINITY }
    else if (char === "+") bounds = { min: 1, max: Number.POSITIVE_INFINITY }
    else if (char === "?") bounds = { min: 0, max: 1 }
    else if (char === "{") {
      const match = /^\{(\d+)(,(\d*))?\}/.exec(this.#source.slice(this.#at))
      if (match === null) return undefined
      const min = Number(match[1])
      const max = match[2] === undefined ? min : match[3] === "" ? Number.POSITIVE_INFINITY : Number(match[3])
      this.#at += match[0].length - 1
      bounds = { min, max }
    }
    if (bounds === undefined) return undefined
    this.#at++
    if (this.#peek() === "?") this.#at++ // lazy: same worst case
    return bounds
  }

  #set(ranges: Ranges, index: number): Node {
    return { kind: "set", set: this.#ignoreCase ? foldCase(ranges) : ranges, index }
  }

  #atom(): Node {
    const index = this.#at
    const char = this.#peek()
    if (char === "(") return this.#group()
    if (char === "[") return this.#set(this.#class(), index)
    if (char === "\\") return this.#escapeAtom()
    this.#at++
    if (char === "^" || char === "$") return { kind: "assert", index }
    if (char === ".") return this.#set(this.#dotAll ? anyChar : complement(lineTerminators), index)
    const code = this.#source.codePointAt(index) ?? 0
    if (code > 0xffff) this.#at++
    return this.#set([[code, code]], index)
  }

  #group(): Node {
    const index = this.#at
    this.#at++ // (
    const rest = this.#source.slice(this.#at)
    if (/^\?(=|!|<=|<!)/.test(rest)) {
      throw new Refusal(
        "lookahead and lookbehind are not supported (RE2, CEL's regular expressions, has neither)",
        index,
      )
    }
    const prefix = /^\?(:|<[^>]+>|[ims]*-?[ims]*:)/.exec(rest)
    if (prefix !== null) this.#at += prefix[0].length
    const node = this.#alternation(index)
    this.#at++ // )
    return node
  }

  #escapeAtom(): Node {
    const index = this.#at
    const next = this.#source[this.#at + 1] ?? ""
    if (/[1-9]/.test(next) || next === "k") {
      throw new Refusal("backreferences are not supported (RE2, CEL's regular expressions, has none)", index)
    }
    if (next === "b" || next === "B") {
      this.#at += 2
      return { kind: "assert", index }
    }
    return this.#set(this.#escape(), index)
  }

  /** One escape at `#at` (a backslash), in or out of a class; returns its characters. */
  #escape(): Ranges {
    const next = this.#source[this.#at + 1] ?? ""
    this.#at += 2
    switch (next) {
      case "d":
        return digit
      case "D":
        return complement(digit)
      case "w":
        return word
      case "W":
        return complement(word)
      case "s":
        return space
      case "S":
        return complement(space)
      case "p":
      case "P": {
        const end = this.#source.indexOf("}", this.#at)
        this.#at = end + 1
        return anyChar
      }
      case "u": {
        const braced = /^\{([0-9a-fA-F]+)\}/.exec(this.#source.slice(this.#at))
        const hex = braced !== null ? braced[1] : this.#source.slice(this.#at, this.#at + 4)
        this.#at += braced !== null ? braced[0].length : 4
        const code = Number.parseInt(hex ?? "0", 16)
        return [[code, code]]
      }
      case "x": {
        const code = Number.parseInt(this.#source.slice(this.#at, this.#at + 2), 16)
        this.#at += 2
        return [[code, code]]
      }
      case "c": {
        const code = (this.#source.codePointAt(this.#at) ?? 0) % 32
        this.#at++
        return [[code, code]]
      }
      default: {
        const simple: Record<string, number> = { n: 10, r: 13, t: 9, v: 11, f: 12, "0": 0 }
        const code = simple[next] ?? next.codePointAt(0) ?? 0
        if (code > 0xffff) this.#at++
        return [[code, code]]
      }
    }
  }

  #class(): Ranges {
    this.#at++ // [
    const negated = this.#peek() === "^"
    if (negated) this.#at++
    const parts: Ranges[] = []
    while (this.#at < this.#source.length && this.#peek() !== "]") {
      const low = this.#classAtom()
      if (this.#peek() === "-" && this.#source[this.#at + 1] !== "]" && this.#at + 1 < this.#source.length) {
        this.#at++
        const high = this.#classAtom()
        const from = singleChar(low)
        const to = singleChar(high)
        parts.push(from !== undefined && to !== undefined ? [[from, to]] : union(low, high))
      } else {
        parts.push(low)
      }
    }
    this.#at++ // ]
    const set = union(...parts)
    return negated ? complement(set) : set
  }

  #classAtom(): Ranges {
    if (this.#peek() === "\\") {
      if (this.#source[this.#at + 1] === "b") {
        this.#at += 2
        return [[8, 8]]
      }
      return this.#escape()
    }
    const code = this.#source.codePointAt(this.#at) ?? 0
    this.#at += code > 0xffff ? 2 : 1
    return [[code, code]]
  }
}

// ---- the analysis ----

type Problem = { reason: string; index: number }

function charsOf(node: Node): Ranges {
  switch (node.kind) {
    case "set":
      return node.set
    case "assert":
      return []
    case "repeat":
      return charsOf(node.body)
    case "group":
      return union(...node.alternatives.flat().map(charsOf))
  }
}

function canBeEmpty(node: Node): boolean {
  switch (node.kind) {
    case "set":
      return false
    case "assert":
      return true
    case "repeat":
      return node.min === 0 || canBeEmpty(node.body)
    case "group":
      return node.alternatives.some((items) => items.every(canBeEmpty))
  }
}

function firstChars(items: readonly Node[]): Ranges {
  const sets: Ranges[] = []
  for (const item of items) {
    sets.push(item.kind === "group" ? union(...item.alternatives.map(firstChars)) : charsOf(item))
    if (!canBeEmpty(item)) break
  }
  return union(...sets)
}

const repeats = (node: Node): boolean => node.kind === "repeat" && node.max > 1
const unbounded = (node: Node): boolean => node.kind === "repeat" && node.max > unboundedAbove

/** Every node below `node`, itself included. */
function* walk(node: Node): Generator<Node> {
  yield node
  if (node.kind === "repeat") yield* walk(node.body)
  if (node.kind === "group") for (const item of node.alternatives.flat()) yield* walk(item)
}

/** A required single character class: what a separator must be. */
function requiredChars(node: Node): Ranges | undefined {
  if (node.kind === "set") return node.set
  if (node.kind === "repeat" && node.min >= 1 && node.body.kind === "set") return node.body.set
  if (node.kind === "group" && node.alternatives.length === 1 && node.alternatives[0]?.length === 1) {
    const only = node.alternatives[0][0]
    return only === undefined ? undefined : requiredChars(only)
  }
  return undefined
}

function overlappingAlternatives(node: Node): Problem | undefined {
  for (const inner of walk(node)) {
    if (inner.kind !== "group" || inner.alternatives.length < 2) continue
    const starts = inner.alternatives.map(firstChars)
    for (let a = 0; a < starts.length; a++) {
      for (let b = a + 1; b < starts.length; b++) {
        if (intersect(starts[a] ?? [], starts[b] ?? []).length > 0) {
          return {
            reason:
              "its alternatives inside a repeated group can match the same text, as in (a|ab)*, which can take exponential time; make the alternatives start differently",
            index: inner.index,
          }
        }
      }
    }
  }
  return undefined
}

function checkRepeat(node: Node & { kind: "repeat" }): Problem | undefined {
  const body = node.body
  const overlap = overlappingAlternatives(body)
  if (overlap !== undefined) return overlap
  const inner = [...walk(body)].filter((item) => item !== body && repeats(item))
  if (body.kind === "repeat") inner.unshift(body)
  if (inner.length === 0) return undefined
  const items = body.kind === "group" && body.alternatives.length === 1 ? (body.alternatives[0] ?? []) : [body]
  for (const item of inner) {
    const chars = charsOf(item)
    const fenced = items.some((candidate) => {
      if (repeats(candidate) || candidate === item) return false
      const required = requiredChars(candidate)
      return required !== undefined && intersect(required, chars).length === 0
    })
    if (!fenced) {
      return {
        reason: `the repeated group ${node.text} holds another repeat, as in (a+)+, which can take exponential time; repeat a single character class instead, or put a required character the inner repeat cannot match between iterations`,
        index: node.index,
      }
    }
  }
  return undefined
}

/** Items of a sequence, with plain (unrepeated, single-alternative) groups flattened in. */
function flatten(items: readonly Node[]): Node[] {
  return items.flatMap((item) =>
    item.kind === "group" && item.alternatives.length === 1 ? flatten(item.alternatives[0] ?? []) : [item],
  )
}

function adjacentRepeats(items: readonly Node[]): Problem | undefined {
  const flat = flatten(items)
  for (let a = 0; a < flat.length; a++) {
    const first = flat[a]
    if (first === undefined || !unbounded(first)) continue
    for (let b = a + 1; b < flat.length; b++) {
      const second = flat[b]
      if (second === undefined || !unbounded(second)) continue
      const shared = intersect(charsOf(first), charsOf(second))
      if (shared.length === 0) continue
      const separated = flat.slice(a + 1, b).some((middle) => {
        const required = canBeEmpty(middle) ? undefined : requiredChars(middle)
        return required !== undefined && intersect(required, shared).length === 0
      })
      if (!separated && first.kind === "repeat" && second.kind === "repeat") {
        return {
          reason: `the repeats ${first.text} and ${second.text} can match the same text, which takes polynomial time on long input; matches() finds the pattern anywhere in the string, so a leading or trailing .* is not needed, or use a class that cannot match the text between them, such as [^@]+ before an @`,
          index: second.index,
        }
      }
    }
  }
  return undefined
}

function findBacktracking(tree: Node): Problem | undefined {
  for (const node of walk(tree)) {
    if (node.kind === "repeat" && repeats(node)) {
      const problem = checkRepeat(node)
      if (problem !== undefined) return problem
    }
    if (node.kind === "group") {
      for (const items of node.alternatives) {
        const problem = adjacentRepeats(items)
        if (problem !== undefined) return problem
      }
    }
  }
  return undefined
}
