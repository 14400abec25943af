import { parseDuration } from "../core/duration.ts"
import { errorMessage } from "../core/errors.ts"
import { suggestion } from "./did-you-mean.ts"
import { childPath, itemPath, type SourceLines } from "./load.ts"
import type { YamlMap, YamlValue } from "./types.ts"
import type { ProblemList } from "./yaml-pipeline-error.ts"

/** A value read from YAML, with where it was written. */
export type Node = { readonly value: YamlValue; readonly path: string; readonly line: number }

export const isMapping = (value: unknown): value is YamlMap =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/**
 * What may stand between `((` and `))` of a variable, as Concourse's
 * vars/interp.go matches it: an optional var source and `:`, then names,
 * dots, colons, `@` and quotes. No spaces or other punctuation, so shell
 * arithmetic such as `$((n + 1))` stays text, as in Concourse.
 */
export const variableReference = String.raw`(?:[-/.\w\p{L}]+:)?[-/.:@"\w\p{L}]+`
const anyVariable = new RegExp(String.raw`\(\(${variableReference}\)\)`, "u")

/** A variable anywhere in the text: `((name))`, `((.:name))`, `((source:name.field))`. */
export const hasVariable = (text: string): boolean => anyVariable.test(text)

/** How a value reads in a message: `a list`, `the number 3`. */
export function describe(value: YamlValue | undefined): string {
  if (value === null || value === undefined) return "empty"
  if (Array.isArray(value)) return "a list"
  if (typeof value === "object") return "a mapping"
  if (typeof value === "string")
    return `the string ${JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value)}`
  return typeof value === "number" ? `the number ${value}` : `${value}`
}

/**
 * Reads typed values out of a YAML tree and records, rather than throws, every
 * problem it meets, so one pass reports them all. Each reader returns
 * undefined for a value it could not accept.
 */
export class Checker {
  readonly #lines: SourceLines
  readonly problems: ProblemList
  constructor(lines: SourceLines, problems: ProblemList) {
    this.#lines = lines
    this.problems = problems
  }

  problem(at: { readonly path: string; readonly line: number }, message: string): undefined {
    this.problems.add(at.path, at.line, message)
    return undefined
  }

  /** The entry `key` of a mapping, or undefined when it is absent or empty (`key:` or `key: null`). */
  child(node: Node, key: string): Node | undefined {
    const map = node.value
    if (!isMapping(map) || !Object.hasOwn(map, key)) return undefined
    const value = map[key]
    if (value === null || value === undefined) return undefined
    return { value, path: childPath(node.path, key), line: this.lineOf(node, key) }
  }

  /** The line of a key of a mapping node, the node's own line when unknown. */
  lineOf(node: Node, key: string | number): number {
    return typeof node.value === "object" && node.value !== null
      ? (this.#lines.lineOf(node.value, key) ?? node.line)
      : node.line
  }

  /**
   * A mapping whose keys are all in `known`; any other key is a problem, with
   * a suggestion when one is close, or the reason when runnel knowingly does
   * not support a key Concourse has (`unsupported`).
   */
  mapping(
    node: Node,
    what: string,
    known: readonly string[],
    unsupported: Readonly<Record<string, string>> = {},
  ): YamlMap | undefined {
    if (!isMapping(node.value)) return this.problem(node, `${what} must be a mapping, not ${describe(node.value)}`)
    for (const key of Object.keys(node.value)) {
      if (known.includes(key)) continue
      const at = { path: childPath(node.path, key), line: this.lineOf(node, key) }
      const reason = Object.hasOwn(unsupported, key) ? unsupported[key] : undefined
      if (reason !== undefined) {
        this.problem(at, reason)
        continue
      }
      const close = suggestion(key, known)
      this.problem(at, `unknown key "${key}" in ${what}${close === "" ? `; known keys: ${known.join(", ")}` : close}`)
    }
    return node.value
  }

  /** A mapping of arbitrary values that the pipeline author owns (params, source, vars). */
  freeMapping(node: Node | undefined): YamlMap {
    if (node === undefined) return {}
    if (!isMapping(node.value)) {
      this.problem(node, `must be a mapping of names to values, not ${describe(node.value)}`)
      return {}
    }
    return node.value
  }

  list(node: Node): Node[] | undefined {
    const value = node.value
    if (!Array.isArray(value)) return this.problem(node, `must be a list, not ${describe(value)}`)
    return value.map((item: YamlValue, index) => ({
      value: item,
      path: itemPath(node.path, index),
      line: this.#lines.lineOf(value, index) ?? node.line,
    }))
  }

  string(node: Node): string | undefined {
    if (typeof node.value === "string") return node.value
    if (typeof node.value === "number" || typeof node.value === "boolean") {
      return this.problem(node, `must be a string, not ${describe(node.value)}; put the value in quotes`)
    }
    return this.problem(node, `must be a string, not ${describe(node.value)}`)
  }

  boolean(node: Node | undefined, fallback = false): boolean {
    if (node === undefined) return fallback
    if (typeof node.value === "boolean") return node.value
    this.problem(node, `must be true or false, not ${describe(node.value)}`)
    return fallback
  }

  /** Variables are not accepted where a number is: the structure must be known when the pipeline is stored. */
  positiveInteger(node: Node): number | undefined {
    const value = node.value
    if (typeof value === "number" && Number.isSafeInteger(value) && value > 0) return value
    return this.problem(node, `must be a whole number of at least 1, not ${describe(value)}`)
  }

  nonNegativeInteger(node: Node): number | undefined {
    const value = node.value
    if (typeof value === "number" && Number.isSafeInteger(value) && value >= 0) return value
    return this.problem(node, `must be a whole number of at least 0, not ${describe(value)}`)
  }

  /** A Go-style duration longer than zero, or a variable that will hold one. */
  duration(node: Node, options: { allowVariable?: boolean; minimumMs?: number } = {}): string | undefined {
    const text = this.string(node)
    if (text === undefined) return undefined
    if (hasVariable(text)) {
      if (options.allowVariable ?? true) return text
      return this.problem(node, "must be written out: a variable is not allowed here")
    }
    let ms: number
    try {
      ms = parseDuration(text)
    } catch (error) {
      return this.problem(node, errorMessage(error))
    }
    const minimumMs = options.minimumMs ?? 1
    if (ms < minimumMs) {
      return this.problem(node, minimumMs <= 1 ? "must be longer than 0" : `must be at least ${minimumMs / 1000}s`)
    }
    return text
  }

  stringList(node: Node | undefined): string[] {
    if (node === undefined) return []
    const items = this.list(node)
    if (items === undefined) return []
    return items.flatMap((item) => this.string(item) ?? [])
  }

  /** A mapping of names to strings (input_mapping, a version). */
  stringMapping(node: Node | undefined): Record<string, string> {
    if (node === undefined) return {}
    if (!isMapping(node.value)) {
      this.problem(node, `must be a mapping of names to strings, not ${describe(node.value)}`)
      return {}
    }
    const out: Record<string, string> = {}
    for (const key of Object.keys(node.value)) {
      const child = this.child(node, key)
      const text =
        child === undefined
          ? this.problem(
              { path: childPath(node.path, key), line: this.lineOf(node, key) },
              "must be a string, not empty",
            )
          : this.string(child)
      if (text !== undefined)
        Object.defineProperty(out, key, { value: text, enumerable: true, writable: true, configurable: true })
    }
    return out
  }

  /** One of `choices`, written out. */
  choice<T extends string>(node: Node, choices: readonly T[]): T | undefined {
    const text = this.string(node)
    if (text === undefined) return undefined
    if ((choices as readonly string[]).includes(text)) return text as T
    return this.problem(node, `must be one of ${choices.join(", ")}, not "${text}"${suggestion(text, choices)}`)
  }
}
