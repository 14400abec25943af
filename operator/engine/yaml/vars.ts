import { SystemError } from "../../../lib/core/errors.ts"
import type { SecretResolver } from "../../../lib/secrets/secret-resolver.ts"
import { variableReference } from "../../../lib/yaml/checker.ts"
import type { YamlMap, YamlValue } from "../../../lib/yaml/types.ts"
import type { GrowingRedactor } from "./redaction.ts"

/** An undefined ((variable)): the step, its job and the run end as `error`, naming it. */
export class UndefinedVariable extends SystemError {
  /** The key it was used at, `params.TOKEN`, when known. */
  readonly where: string | undefined
  constructor(message: string, where?: string) {
    super(where === undefined ? message : `${message} (used in ${where})`)
    this.name = "UndefinedVariable"
    this.where = where
  }
}

/** Where ((variables)) come from at one point of a run. */
export type VarLookup = {
  /** runnel's secrets for `((name))`: pipeline scope, then global. */
  readonly secrets: SecretResolver
  /** Values from secrets and var sources are added to it as they are resolved. */
  readonly redactor: GrowingRedactor
  /** `((source:name))`: the pipeline's dummy var sources. */
  readonly sources: ReadonlyMap<string, YamlMap>
  /** `((.:name))`: load_var and across values of the current scope. */
  readonly locals: ReadonlyMap<string, YamlValue>
  /** A task file's `vars`: looked up before secrets, as Concourse's static vars come before its credential manager. */
  readonly given?: YamlMap
}

const variablePattern = new RegExp(String.raw`\(\((${variableReference})\)\)`, "gu")
const wholePattern = new RegExp(String.raw`^\(\((${variableReference})\)\)$`, "u")

/**
 * Replaces every ((variable)) in the strings of `value` (deeply, keys left
 * alone). A string that is exactly one variable takes the variable's value as
 * it is (a list, a mapping); inside other text a value that is not a string
 * is written as JSON. Throws UndefinedVariable naming the first undefined one
 * and where it was used: `where` (the step's key, `params`) and the keys
 * inside it (`params.TOKEN`).
 */
export async function interpolate<T>(value: T, lookup: VarLookup, where = ""): Promise<T> {
  return (await walk(value, lookup, where)) as T
}

async function walk(value: unknown, lookup: VarLookup, where: string): Promise<unknown> {
  if (typeof value === "string") return interpolateString(value, lookup, where)
  if (Array.isArray(value)) {
    const out: unknown[] = []
    for (const [index, item] of value.entries()) out.push(await walk(item, lookup, `${where}[${index}]`))
    return out
  }
  if (typeof value === "object" && value !== null) {
    const out: Record<string, unknown> = {}
    for (const [key, item] of Object.entries(value)) {
      out[key] = await walk(item, lookup, where === "" ? key : `${where}.${key}`)
    }
    return out
  }
  return value
}

async function interpolateString(text: string, lookup: VarLookup, where: string): Promise<YamlValue> {
  if (!text.includes("((")) return text
  try {
    const whole = wholePattern.exec(text)
    if (whole !== null) return await resolveVariable(whole[1] ?? "", lookup)
    let out = ""
    let last = 0
    for (const match of text.matchAll(variablePattern)) {
      const value = await resolveVariable(match[1] ?? "", lookup)
      out += text.slice(last, match.index) + (typeof value === "string" ? value : JSON.stringify(value))
      last = match.index + match[0].length
    }
    return out + text.slice(last)
  } catch (error) {
    if (!(error instanceof UndefinedVariable) || where === "" || error.where !== undefined) throw error
    throw new UndefinedVariable(error.message, where)
  }
}

/** Interpolates a string and insists on a string result (a timeout, a file path, a pipeline name). */
export async function interpolateText(text: string, lookup: VarLookup, what: string): Promise<string> {
  const value = await interpolateString(text, lookup, what)
  if (typeof value === "string") return value
  if (typeof value === "number" || typeof value === "boolean") return String(value)
  throw new SystemError(`${what} "${text}" must be a string, but its variable holds ${JSON.stringify(value)}`)
}

/**
 * A ((variable)) read as Concourse reads it (vars/reference.go): an optional
 * source before the first `:` outside quotes (`.` for load_var and across),
 * then a path and fields split at `.` outside quotes. A quoted segment keeps
 * its dots, colons and spaces (`((vault:"a.b".field))`); an unquoted one is
 * trimmed.
 */
type VariableReference = { readonly source?: string; readonly path: string; readonly fields: readonly string[] }

export function parseReference(reference: string): VariableReference {
  const shown = `((${reference}))`
  if ((reference.match(/"/g) ?? []).length % 2 !== 0) {
    throw new UndefinedVariable(`invalid variable ${shown}: a quote is not closed`)
  }
  const colon = unquotedIndex(reference, ":")
  let rest = reference
  let source: string | undefined
  if (colon >= 0) {
    source = reference.slice(0, colon).trim()
    if (source.includes('"')) throw new UndefinedVariable(`invalid variable ${shown}: a var source name is not quoted`)
    rest = reference.slice(colon + 1)
  }
  const segments: string[] = []
  for (;;) {
    const dot = unquotedIndex(rest, ".")
    const raw = (dot < 0 ? rest : rest.slice(0, dot)).trim()
    const segment = /^"[^"]*"$/.test(raw) ? raw.slice(1, -1) : raw.replaceAll('"', "")
    if (segment === "") throw new UndefinedVariable(`invalid variable ${shown}: it has an empty name or field`)
    segments.push(segment)
    if (dot < 0) break
    rest = rest.slice(dot + 1)
  }
  const [path = "", ...fields] = segments
  return { ...(source === undefined ? {} : { source }), path, fields }
}

/** The index of `char` outside double quotes, or -1. */
function unquotedIndex(text: string, char: string): number {
  let quoted = false
  for (let i = 0; i < text.length; i++) {
    if (text[i] === '"') quoted = !quoted
    else if (text[i] === char && !quoted) return i
  }
  return -1
}

/** The value of one variable, `name`, `name.field`, `.:name`, `source:name` or with quoted segments. */
export async function resolveVariable(reference: string, lookup: VarLookup): Promise<YamlValue> {
  const shown = `((${reference.trim()}))`
  const { source, path: name, fields } = parseReference(reference.trim())
  let value: YamlValue | undefined
  if (source === ".") {
    value = lookup.locals.get(name)
    if (value === undefined) {
      throw new UndefinedVariable(
        `undefined variable ${shown}: no load_var step or across var named "${name}" ran before this step`,
      )
    }
  } else if (source !== undefined) {
    const vars = lookup.sources.get(source)
    if (vars === undefined) {
      const known = [...lookup.sources.keys()]
      throw new UndefinedVariable(
        `undefined variable ${shown}: the pipeline has no var source "${source}"${known.length === 0 ? "" : `; var sources: ${known.join(", ")}`}`,
      )
    }
    value = vars[name]
    if (value === undefined)
      throw new UndefinedVariable(`undefined variable ${shown}: var source "${source}" has no var "${name}"`)
    addLeaves(lookup.redactor, value)
  } else {
    value = lookup.given?.[name]
    if (value === undefined) {
      const secret = await lookup.secrets.get(name)
      if (secret === undefined) {
        throw new UndefinedVariable(
          `undefined variable ${shown}: no secret named "${name}"; set it as a pipeline or global secret (runnel runner: --secret ${name}=VALUE)`,
        )
      }
      lookup.redactor.add([secret])
      value = fields.length > 0 ? parsedSecret(secret) : secret
    }
  }
  return fieldsOf(value, fields, shown)
}

function fieldsOf(value: YamlValue, fields: readonly string[], shown: string): YamlValue {
  let current = value
  for (const field of fields) {
    const next: YamlValue | undefined =
      typeof current === "object" && current !== null && !Array.isArray(current)
        ? (current as YamlMap)[field]
        : undefined
    if (next === undefined) {
      const keys =
        typeof current === "object" && current !== null && !Array.isArray(current) ? Object.keys(current) : []
      const known = keys.length === 0 ? "" : `; it has ${keys.map((key) => `"${key}"`).join(", ")}`
      throw new UndefinedVariable(`undefined variable ${shown}: the value has no field "${field}"${known}`)
    }
    current = next
  }
  return current
}

/** A secret read with fields (`((creds.user))`) is JSON; other text has no fields. */
function parsedSecret(secret: string): YamlValue {
  try {
    return JSON.parse(secret) as YamlValue
  } catch {
    return secret
  }
}

/** Every string inside `value`, for the redactor (numbers and booleans would mask too much). */
export function addLeaves(redactor: GrowingRedactor, value: YamlValue): void {
  if (typeof value === "string") redactor.add([value])
  else if (Array.isArray(value)) for (const item of value) addLeaves(redactor, item)
  else if (typeof value === "object" && value !== null)
    for (const item of Object.values(value)) addLeaves(redactor, item)
}

/**
 * set_pipeline's `vars`: replaces ((name)) and ((name.field)) for the names
 * given and leaves every other variable for the new pipeline's runs, as
 * `fly set-pipeline --var` does.
 */
export function substituteGiven(text: string, vars: YamlMap): string {
  return substitute(text, (parsed) => (parsed.source === undefined ? vars[parsed.path] : undefined))
}

/**
 * A step's name as its task path shows it: ((.:name)) of the scope's load_var
 * and across values written in (`test-((.:os))` is `test-linux`), other
 * variables left as written.
 */
export function substituteLocals(text: string, locals: ReadonlyMap<string, YamlValue>): string {
  if (!text.includes("((")) return text
  return substitute(text, (parsed) => (parsed.source === "." ? locals.get(parsed.path) : undefined))
}

/** Replaces each variable `pick` gives a value for (then its fields); leaves the others. */
function substitute(text: string, pick: (parsed: VariableReference) => YamlValue | undefined): string {
  return text.replace(variablePattern, (whole, reference: string) => {
    let parsed: VariableReference
    try {
      parsed = parseReference(reference.trim())
    } catch {
      return whole
    }
    let value = pick(parsed)
    for (const field of parsed.fields) {
      value =
        typeof value === "object" && value !== null && !Array.isArray(value) ? (value as YamlMap)[field] : undefined
    }
    if (value === undefined) return whole
    return typeof value === "string" ? value : JSON.stringify(value)
  })
}
