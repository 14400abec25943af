/**
 * Label and field selectors with Kubernetes' syntax:
 * labels `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x,y)`, `a`, `!a`, `a>1`, `a<1`;
 * fields `path=value`, `path==value`, `path!=value` (with `\,` `\=` `\\` escapes).
 * A selector is a conjunction: every requirement must hold.
 */

export type LabelRequirement =
  | { readonly key: string; readonly operator: "in" | "notin"; readonly values: readonly string[] }
  | { readonly key: string; readonly operator: "exists" | "!exists" }
  | { readonly key: string; readonly operator: "gt" | "lt"; readonly value: number }

export type LabelSelector = readonly LabelRequirement[]

export class SelectorError extends Error {
  constructor(message: string) {
    super(message)
    this.name = "SelectorError"
  }
}

const keyPattern =
  /^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/
const valuePattern = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/

function checkKey(key: string) {
  if (!keyPattern.test(key)) throw new SelectorError(`unable to parse requirement: invalid label key "${key}"`)
  return key
}
function checkValue(value: string) {
  if (value.length > 63 || !valuePattern.test(value)) {
    throw new SelectorError(`unable to parse requirement: invalid label value: "${value}"`)
  }
  return value
}

/** Splits on commas that are not inside parentheses. */
function splitTopLevel(text: string): string[] {
  const parts: string[] = []
  let depth = 0
  let start = 0
  for (let index = 0; index < text.length; index++) {
    const char = text[index]
    if (char === "(") depth++
    else if (char === ")") depth--
    else if (char === "," && depth === 0) {
      parts.push(text.slice(start, index))
      start = index + 1
    }
  }
  parts.push(text.slice(start))
  return parts
}

export function parseLabelSelector(text: string | undefined): LabelSelector {
  if (text === undefined || text.trim() === "") return []
  return splitTopLevel(text).map((raw): LabelRequirement => {
    const part = raw.trim()
    if (part === "") throw new SelectorError(`found '', expected: identifier in label selector "${text}"`)
    const set = /^(\S+)\s+(in|notin)\s*\((.*)\)$/.exec(part)
    if (set !== null) {
      const values = (set[3] ?? "")
        .split(",")
        .map((value) => value.trim())
        .filter((value, _index, all) => value !== "" || all.length > 1)
      if (values.length === 0)
        throw new SelectorError(`unable to parse requirement: for 'in', 'notin' operators, values set can't be empty`)
      return { key: checkKey(set[1] ?? ""), operator: set[2] === "in" ? "in" : "notin", values: values.map(checkValue) }
    }
    if (part.startsWith("!")) return { key: checkKey(part.slice(1).trim()), operator: "!exists" }
    const comparison = /^([^=!<>\s]+)\s*(==|=|!=|>|<)\s*(.*)$/.exec(part)
    if (comparison !== null) {
      const key = checkKey(comparison[1] ?? "")
      const operator = comparison[2]
      const value = (comparison[3] ?? "").trim()
      if (operator === ">" || operator === "<") {
        const number = Number(value)
        if (value === "" || !Number.isInteger(number)) {
          throw new SelectorError(`unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer`)
        }
        return { key, operator: operator === ">" ? "gt" : "lt", value: number }
      }
      return { key, operator: operator === "!=" ? "notin" : "in", values: [checkValue(value)] }
    }
    if (/\s/.test(part))
      throw new SelectorError(`unable to parse requirement: found '${part}', expected: '=', '!=', '==', 'in', notin'`)
    return { key: checkKey(part), operator: "exists" }
  })
}

export function labelsMatch(selector: LabelSelector, labels: Readonly<Record<string, string>> | undefined): boolean {
  return selector.every((requirement) => {
    const value = labels?.[requirement.key]
    switch (requirement.operator) {
      case "exists":
        return value !== undefined
      case "!exists":
        return value === undefined
      case "in":
        return value !== undefined && requirement.values.includes(value)
      case "notin":
        return value === undefined || !requirement.values.includes(value)
      case "gt":
        return value !== undefined && /^-?\d+$/.test(value) && Number(value) > requirement.value
      case "lt":
        return value !== undefined && /^-?\d+$/.test(value) && Number(value) < requirement.value
    }
    return false
  })
}

export type FieldRequirement = { readonly field: string; readonly operator: "=" | "!="; readonly value: string }
export type FieldSelector = readonly FieldRequirement[]

/** Splits on unescaped commas, keeping escapes for the next step. */
function splitEscaped(text: string, separator: string): string[] {
  const parts: string[] = []
  let current = ""
  for (let index = 0; index < text.length; index++) {
    const char = text[index] ?? ""
    if (char === "\\") {
      current += char + (text[index + 1] ?? "")
      index++
    } else if (char === separator) {
      parts.push(current)
      current = ""
    } else {
      current += char
    }
  }
  parts.push(current)
  return parts
}

const unescapeSelector = (text: string) => text.replace(/\\(.)/g, "$1")

/** Parses a field selector; `supported` lists the field paths this kind can be selected by. */
export function parseFieldSelector(text: string | undefined, supported: readonly string[]): FieldSelector {
  if (text === undefined || text.trim() === "") return []
  return splitEscaped(text, ",").map((raw) => {
    const match = /^((?:[^=!\\]|\\.)+?)\s*(==|=|!=)\s*(.*)$/.exec(raw.trim())
    if (match === null) throw new SelectorError(`invalid selector: '${text}'; can't understand '${raw}'`)
    const field = unescapeSelector(match[1] ?? "")
    if (!supported.includes(field)) throw new SelectorError(`field label not supported: ${field}`)
    return { field, operator: match[2] === "!=" ? "!=" : "=", value: unescapeSelector(match[3] ?? "") }
  })
}

export function fieldsMatch(selector: FieldSelector, fields: Readonly<Record<string, string>>): boolean {
  return selector.every(({ field, operator, value }) => (fields[field] === value) === (operator === "="))
}
