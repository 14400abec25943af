import { SystemError } from "../../../lib/core/errors.ts"
import type { SecretResolver } from "../../../lib/secrets/secret-resolver.ts"
import type { YamlMap, YamlValue } from "../../../lib/yaml/types.ts"
import type { GrowingRedactor } from "./redaction.ts"

/** An undefined ((variable)): the step, its job and the run end as `error`, naming it. */
export class UndefinedVariable extends SystemError {
  constructor(message: string) {
    super(message)
    this.name = "UndefinedVariable"
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

const variablePattern = /\(\(([^()]*)\)\)/g
const wholePattern = /^\(\(([^()]*)\)\)$/

/**
 * Replaces every ((variable)) in the strings of `value` (deeply, keys left
 * alone). A string that is exactly one variable takes the variable's value as
 * it is (a list, a mapping); inside other text a value that is not a string
 * is written as JSON. Throws UndefinedVariable naming the first undefined one.
 */
export async function interpolate<T>(value: T, lookup: VarLookup): Promise<T> {
  return (await walk(value, lookup)) as T
}

async function walk(value: unknown, lookup: VarLookup): Promise<unknown> {
  if (typeof value === "string") return interpolateString(value, lookup)
  if (Array.isArray(value)) {
    const out: unknown[] = []
    for (const item of value) out.push(await walk(item, lookup))
    return out
  }
  if (typeof value === "object" && value !== null) {
    const out: Record<string, unknown> = {}
    for (const [key, item] of Object.entries(value)) out[key] = await walk(item, lookup)
    return out
  }
  return value
}

async function interpolateString(text: string, lookup: VarLookup): Promise<YamlValue> {
  if (!text.includes("((")) return text
  const whole = wholePattern.exec(text)
  if (whole !== null) return resolveVariable(whole[1] ?? "", lookup)
  let out = ""
  let last = 0
  for (const match of text.matchAll(variablePattern)) {
    const value = await resolveVariable(match[1] ?? "", lookup)
    out += text.slice(last, match.index) + (typeof value === "string" ? value : JSON.stringify(value))
    last = match.index + match[0].length
  }
  return out + text.slice(last)
}

/** Interpolates a string and insists on a string result (a timeout, a file path, a pipeline name). */
export async function interpolateText(text: string, lookup: VarLookup, what: string): Promise<string> {
  const value = await interpolateString(text, lookup)
  if (typeof value === "string") return value
  if (typeof value === "number" || typeof value === "boolean") return String(value)
  throw new SystemError(`${what} "${text}" must be a string, but its variable holds ${JSON.stringify(value)}`)
}

/** The value of one variable, `name`, `name.field`, `.:name` or `source:name`. */
export async function resolveVariable(reference: string, lookup: VarLookup): Promise<YamlValue> {
  const text = reference.trim()
  const shown = `((${text}))`
  const colon = text.indexOf(":")
  const source = colon < 0 ? undefined : text.slice(0, colon)
  const [name = "", ...fields] = (colon < 0 ? text : text.slice(colon + 1)).split(".")
  if (name === "") throw new UndefinedVariable(`undefined variable ${shown}: it names no variable`)
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
  for (const field of fields) {
    const next: YamlValue | undefined =
      typeof value === "object" && value !== null && !Array.isArray(value) ? (value as YamlMap)[field] : undefined
    if (next === undefined)
      throw new UndefinedVariable(`undefined variable ${shown}: the value has no field "${field}"`)
    value = next
  }
  return value
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
  return text.replace(variablePattern, (whole, reference: string) => {
    const [name = "", ...fields] = reference.trim().split(".")
    if (reference.includes(":")) return whole
    let value: YamlValue | undefined = vars[name]
    for (const field of fields) {
      value =
        typeof value === "object" && value !== null && !Array.isArray(value) ? (value as YamlMap)[field] : undefined
    }
    if (value === undefined) return whole
    return typeof value === "string" ? value : JSON.stringify(value)
  })
}
