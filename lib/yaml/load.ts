import {
  type Document,
  isAlias,
  isMap,
  isPair,
  isScalar,
  isSeq,
  LineCounter,
  parseDocument,
  type Scalar,
  type Tags,
  type YAMLError,
  type Node as YamlNode,
} from "yaml"
import { errorMessage } from "../core/errors.ts"
import type { YamlValue } from "./types.ts"
import type { ProblemList } from "./yaml-pipeline-error.ts"

/** A document bigger than this is refused before it is parsed. */
export const maxDocumentBytes = 1 << 20
/** Mappings and lists nested deeper than this are refused (steps have their own, lower limit). */
export const maxNestingDepth = 256
/** Values that aliases may add by expansion; more is an alias bomb ("billion laughs"). */
export const maxAliasValues = 100_000

/** Where each entry of a mapping or list converted from YAML was written: 1-based lines. */
export class SourceLines {
  readonly #children = new WeakMap<object, Map<string | number, number>>()
  record(container: object, lines: Map<string | number, number>): void {
    this.#children.set(container, lines)
  }
  /** The line of a mapping's key or of a list's item; undefined for values not read from YAML. */
  lineOf(container: object, key: string | number): number | undefined {
    return this.#children.get(container)?.get(key)
  }
}

/**
 * The yaml package takes seconds to give up on a megabyte of `[[[[…`, so such
 * text is refused first. Brackets are counted everywhere, even in strings and
 * comments: legitimate text never opens this many more than it closes.
 */
const maxBracketDepth = 1000

function tooDeepBrackets(text: string): number | undefined {
  let depth = 0
  let line = 1
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i)
    if (code === 0x5b || code === 0x7b) {
      if (++depth > maxBracketDepth) return line
    } else if (code === 0x5d || code === 0x7d) {
      if (depth > 0) depth--
    } else if (code === 0x0a) {
      line++
    }
  }
  return undefined
}

export type LoadedYaml = { readonly root: YamlValue; readonly lines: SourceLines }

/** `jobs[1].plan` + `task` = `jobs[1].plan.task`; odd keys are quoted: `params["MY KEY"]`. */
export function childPath(path: string, key: string): string {
  if (!/^[A-Za-z_][A-Za-z0-9_-]*$/.test(key)) return `${path}[${JSON.stringify(key)}]`
  return path === "" ? key : `${path}.${key}`
}

export function itemPath(path: string, index: number): string {
  return `${path}[${index}]`
}

// Concourse reads pipelines with go-yaml v2, which is YAML 1.1: `yes`/`no`/`on`/
// `off` are booleans and `<<` merges mappings. runnel reads YAML 1.1 too, so a
// pipeline means the same thing in both, except that go-yaml keeps timestamps
// (`2024-01-01`) and sexagesimal numbers (`9:30`) as strings, and so does runnel:
// those tags are removed, or a time resource's `start: 9:30` would become 570.
const withoutTimeTags = (tags: Tags): Tags =>
  tags.filter((tag) => {
    if (typeof tag !== "object") return true
    return tag.tag !== "tag:yaml.org,2002:timestamp" && tag.format !== "TIME"
  })

/**
 * Reads YAML text into plain values and the line of every entry, adding to
 * `problems` (and returning undefined) when the text is not a usable document.
 *
 * Anchors and aliases are accepted, as Concourse accepts them (pipelines often
 * share hooks or params with `&anchor`/`*alias` and `<<:` merges), with two
 * guards: aliases may add at most `maxAliasValues` values when expanded, and an
 * alias may not refer to a value that contains it. Tabs used as indentation,
 * duplicate keys and several documents in one file are errors.
 */
export function loadYaml(text: string, problems: ProblemList): LoadedYaml | undefined {
  const bytes = Buffer.byteLength(text, "utf8")
  if (bytes > maxDocumentBytes) {
    problems.add("", 0, `the document is ${(bytes / maxDocumentBytes).toFixed(1)} MiB; the limit is 1 MiB`)
    return undefined
  }
  const bracketLine = tooDeepBrackets(text)
  if (bracketLine !== undefined) {
    problems.add("", bracketLine, `brackets ([ and {) nest more than ${maxBracketDepth} levels deep`)
    return undefined
  }
  const lineCounter = new LineCounter()
  let doc: Document.Parsed
  try {
    doc = parseDocument(text, {
      lineCounter,
      prettyErrors: false,
      uniqueKeys: true,
      version: "1.1",
      merge: true,
      customTags: withoutTimeTags,
      keepSourceTokens: false,
    })
  } catch (error) {
    problems.add("", 1, `the YAML could not be read: ${errorMessage(error)}`)
    return undefined
  }
  const lineAt = (offset: number) => lineCounter.linePos(offset).line
  if (doc.errors.length > 0) {
    reportYamlErrors(doc, text, lineAt, problems)
    return undefined
  }
  const converter = new Converter(lineAt, problems)
  try {
    const root = converter.convert(doc.contents, "", 0, false)
    return converter.failed ? undefined : { root, lines: converter.lines }
  } catch (error) {
    // The converter's depth limit sits well below the stack's, but a tiny stack is not worth a crash.
    if (!(error instanceof RangeError)) throw error
    problems.add("", 1, "the document nests too deeply to read")
    return undefined
  }
}

function reportYamlErrors(
  doc: Document.Parsed,
  text: string,
  lineAt: (offset: number) => number,
  problems: ProblemList,
): void {
  // A tab used as indentation derails the parser, which then reports confusing
  // follow-on errors: when there are tabs, they are the whole story.
  const tabs = doc.errors.filter((error) => error.code === "TAB_AS_INDENT")
  const errors = tabs.length > 0 ? tabs : doc.errors
  const seen = new Set<string>()
  for (const error of errors) {
    const offset = error.pos[0]
    const line = lineAt(offset)
    const key = `${error.code} ${line}`
    if (seen.has(key)) continue
    seen.add(key)
    if (seen.size > 10) break
    const { path, key: keyName } = pathAtOffset(doc, offset)
    problems.add(path, line, describeYamlError(error, keyName ?? text.slice(offset, error.pos[1])))
  }
}

function describeYamlError(error: YAMLError, key: string): string {
  switch (error.code) {
    case "TAB_AS_INDENT":
      return "a tab indents this line; YAML indents with spaces only, so replace the tab with spaces"
    case "DUPLICATE_KEY":
      return `the key "${key}" appears more than once in the same mapping; keep one`
    case "MULTIPLE_DOCS":
      return "the file holds more than one YAML document (a second `---`); a pipeline is a single document"
    case "RESOURCE_EXHAUSTION":
      return "the YAML nests too deeply to read"
    default:
      return `invalid YAML: ${error.message}`
  }
}

/** The path of the deepest key or item of the (partly parsed) document that holds `offset`. */
function pathAtOffset(doc: Document.Parsed, offset: number): { path: string; key?: string } {
  let node: unknown = doc.contents
  let path = ""
  for (;;) {
    let next: unknown
    if (isMap(node)) {
      for (const pair of node.items) {
        const key = isScalar(pair.key) ? String(pair.key.value) : undefined
        const keyRange = isScalar(pair.key) ? pair.key.range : undefined
        if (key !== undefined && keyRange && keyRange[0] <= offset && offset <= keyRange[1]) {
          return { path: childPath(path, key), key }
        }
        if (contains(pair.value, offset)) {
          path = childPath(path, key ?? "?")
          next = pair.value
          break
        }
      }
    } else if (isSeq(node)) {
      node.items.forEach((item, index) => {
        if (next === undefined && contains(item, offset)) {
          path = itemPath(path, index)
          next = item
        }
      })
    }
    if (next === undefined) return { path }
    node = next
  }
}

function contains(node: unknown, offset: number): boolean {
  const range = (node as { range?: [number, number, number] } | null)?.range
  return range !== undefined && range[0] <= offset && offset < range[2]
}

const mergeTag = "tag:yaml.org,2002:merge"

class Converter {
  readonly lines = new SourceLines()
  failed = false
  readonly #lineAt: (offset: number) => number
  readonly #problems: ProblemList
  /** The latest node with each anchor, in document order: an alias refers to the one before it. */
  readonly #anchors = new Map<string, YamlNode>()
  /** Collections being converted right now: an alias to one of them would recurse forever. */
  readonly #open = new Set<YamlNode>()
  #aliasValues = 0
  /** The alias in the document itself (not inside an expansion) being expanded: where a bomb is reported. */
  #aliasSite: { path: string; node: unknown } | undefined

  constructor(lineAt: (offset: number) => number, problems: ProblemList) {
    this.#lineAt = lineAt
    this.#problems = problems
  }

  #fail(path: string, node: unknown, message: string): null {
    if (!this.failed) this.#problems.add(path, this.#line(node) ?? 1, message)
    this.failed = true
    return null
  }

  #line(node: unknown): number | undefined {
    const range = (node as { range?: [number, number, number] } | null)?.range
    return range === undefined ? undefined : this.#lineAt(range[0])
  }

  /** `expanded`: reached through an alias, so it counts against the alias budget and defines no anchors. */
  convert(node: unknown, path: string, depth: number, expanded: boolean): YamlValue {
    if (this.failed || node === null || node === undefined) return null
    if (depth > maxNestingDepth) return this.#fail(path, node, `values nest more than ${maxNestingDepth} levels deep`)
    if (expanded && ++this.#aliasValues > maxAliasValues) {
      return this.#fail(
        this.#aliasSite?.path ?? path,
        this.#aliasSite?.node ?? node,
        `aliases expand to more than ${maxAliasValues} values, which looks like an alias bomb; write the values out or use fewer nested aliases`,
      )
    }
    if (isAlias(node)) {
      const target = this.#anchors.get(node.source)
      if (target === undefined) {
        return this.#fail(path, node, `the alias *${node.source} has no anchor &${node.source} before it`)
      }
      if (this.#open.has(target)) {
        return this.#fail(path, node, `the alias *${node.source} refers to a value that contains it`)
      }
      if (expanded) return this.convert(target, path, depth, true)
      this.#aliasSite = { path, node }
      try {
        return this.convert(target, path, depth, true)
      } finally {
        this.#aliasSite = undefined
      }
    }
    const yamlNode = node as YamlNode
    if (!expanded && yamlNode.anchor !== undefined) this.#anchors.set(yamlNode.anchor, yamlNode)
    if (isScalar(node)) return scalarValue(node)
    if (!isMap(node) && !isSeq(node)) return this.#fail(path, node, "this YAML node is not supported")
    this.#open.add(yamlNode)
    try {
      return isSeq(node)
        ? this.#list(node.items, path, depth, expanded)
        : this.#mapping(node.items, path, depth, expanded)
    } finally {
      this.#open.delete(yamlNode)
    }
  }

  #list(items: readonly unknown[], path: string, depth: number, expanded: boolean): YamlValue[] {
    const out: YamlValue[] = []
    const lines = new Map<string | number, number>()
    items.forEach((item, index) => {
      // A `!!set` or `!!omap` holds pairs; read each as a one-entry mapping.
      const value = isPair(item) ? this.#mapping([item], itemPath(path, index), depth + 1, expanded) : item
      const line = this.#line(isPair(item) ? item.key : item)
      if (line !== undefined) lines.set(index, line)
      out.push(isPair(item) ? (value as YamlValue) : this.convert(value, itemPath(path, index), depth + 1, expanded))
    })
    this.lines.record(out, lines)
    return out
  }

  #mapping(pairs: readonly unknown[], path: string, depth: number, expanded: boolean): Record<string, YamlValue> {
    const out: Record<string, YamlValue> = {}
    const lines = new Map<string | number, number>()
    const merged: Record<string, YamlValue>[] = []
    for (const pair of pairs) {
      if (!isPair(pair)) continue
      const keyNode = isAlias(pair.key) ? this.#anchors.get(pair.key.source) : pair.key
      if (isScalar(keyNode) && (typeof keyNode.value === "symbol" || keyNode.tag === mergeTag)) {
        merged.push(...this.#mergeSources(pair.value, childPath(path, "<<"), depth, expanded))
        continue
      }
      if (keyNode !== null && keyNode !== undefined && !isScalar(keyNode)) {
        this.#fail(path, pair.key, "a key must be a plain value, not a list or a mapping")
        return out
      }
      const key = keyNode === null || keyNode === undefined ? "null" : keyText(keyNode)
      const keyPath = childPath(path, key)
      if (Object.hasOwn(out, key)) {
        this.#fail(keyPath, pair.key, `the key "${key}" appears more than once in the same mapping; keep one`)
        return out
      }
      const line = this.#line(pair.key) ?? this.#line(pair.value)
      if (line !== undefined) lines.set(key, line)
      define(out, key, this.convert(pair.value, keyPath, depth + 1, expanded))
    }
    // Keys written in the mapping win over merged ones; earlier merge sources win over later ones.
    for (const source of merged) {
      for (const [key, value] of Object.entries(source)) {
        if (Object.hasOwn(out, key)) continue
        define(out, key, value)
        const line = this.lines.lineOf(source, key)
        if (line !== undefined) lines.set(key, line)
      }
    }
    this.lines.record(out, lines)
    return out
  }

  #mergeSources(value: unknown, path: string, depth: number, expanded: boolean): Record<string, YamlValue>[] {
    const sources = isSeq(value) ? value.items : [value]
    const out: Record<string, YamlValue>[] = []
    for (const source of sources) {
      const converted = this.convert(source, path, depth + 1, expanded)
      if (converted === null || typeof converted !== "object" || Array.isArray(converted)) {
        if (!this.failed)
          this.#fail(path, source, "`<<` merges mappings only: give it a mapping, an alias of one, or a list of them")
        return out
      }
      out.push(converted as Record<string, YamlValue>)
    }
    return out
  }
}

function scalarValue(node: Scalar): YamlValue {
  const value = node.value
  if (value === null || typeof value === "string" || typeof value === "boolean") return value
  if (typeof value === "number" && Number.isFinite(value)) return value
  // `.inf`, `!!binary`, a `<<` in value position: keep what was written.
  return node.source ?? String(value)
}

function keyText(node: Scalar): string {
  const value = scalarValue(node)
  return value === null ? "null" : String(value)
}

// Plain assignment of a key named `__proto__` would replace the object's prototype.
function define(target: Record<string, YamlValue>, key: string, value: YamlValue): void {
  Object.defineProperty(target, key, { value, writable: true, enumerable: true, configurable: true })
}
