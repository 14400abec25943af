/**
 * CEL expressions (contract.md section 8): RBAC rules and webhook conditions.
 * - compileExpression() parses and type-checks once, when a rule is configured,
 *   and throws ExpressionError (400) with the line:column of the mistake.
 * - Expression.evaluate() never throws: an evaluation error (a missing key, a
 *   value of the wrong type) counts as false and goes to `onError` for the
 *   caller to log.
 * - `matches` runs on JavaScript regular expressions behind regex-guard.ts.
 */

import type { ASTNode, ParseResult } from "@marcbachmann/cel-js"
import { Environment, EvaluationError } from "@marcbachmann/cel-js"
import { RunnelError } from "../core/errors.ts"
import { cachedPattern, checkPattern, maxMatchInputChars } from "./regex-guard.ts"

/** The user an RBAC rule is about (interface.md "Authenticated user"). */
export type RbacVariables = {
  Email: string
  Name: string
  NickName: string
  Provider: string
  UserID: string
  /** Empty when the provider gives none. */
  Organizations: readonly string[]
  /** Empty when the provider gives none. */
  Groups: readonly string[]
}

/** The request a webhook condition is about (interface.md "Conditional execution"). */
export type WebhookVariables = {
  provider: string
  eventType: string
  method: string
  body: string
  /** Header names lower-case. */
  headers: Readonly<Record<string, string>> | ReadonlyMap<string, string>
  query: Readonly<Record<string, string>> | ReadonlyMap<string, string>
  /** The JSON body, `null` when the body is not JSON: see webhookPayload(). */
  payload: unknown
}

export type ExpressionVariables = { rbac: RbacVariables; webhook: WebhookVariables }
export type ExpressionEnvironment = keyof ExpressionVariables

/** Where a mistake is, 1-based, as editors count. */
export type SourcePosition = { line: number; column: number }

/**
 * A rule a person wrote that runnel cannot use (code `invalid_expression`,
 * thrown at compile time) or could not evaluate (code `expression_failed`,
 * handed to the `onError` of evaluate()). The message says where and why.
 */
export class ExpressionError extends RunnelError {
  readonly position: SourcePosition | undefined
  constructor(code: string, message: string, position?: SourcePosition, options?: ErrorOptions) {
    super(400, code, message, options)
    this.name = "ExpressionError"
    this.position = position
  }
}

export type EvaluationErrorHandler = (error: ExpressionError) => void

export interface Expression<E extends ExpressionEnvironment> {
  readonly environment: E
  readonly source: string
  /** true or false; an error counts as false and is passed to `onError`. Never throws. */
  evaluate(variables: ExpressionVariables[E], onError?: EvaluationErrorHandler): boolean
}

/** Longest expression accepted; rules are a line or two. */
export const maxExpressionChars = 4096

const declarations: { readonly [E in ExpressionEnvironment]: Readonly<Record<keyof ExpressionVariables[E], string>> } =
  {
    rbac: {
      Email: "string",
      Name: "string",
      NickName: "string",
      Provider: "string",
      UserID: "string",
      Organizations: "list<string>",
      Groups: "list<string>",
    },
    webhook: {
      provider: "string",
      eventType: "string",
      method: "string",
      body: "string",
      headers: "map<string, string>",
      query: "map<string, string>",
      payload: "dyn",
    },
  }

/** The variables of an environment with their CEL types, for documentation and messages. */
export function expressionVariables(environment: ExpressionEnvironment): Readonly<Record<string, string>> {
  return declarations[environment]
}

// cel-js's own `matches` cannot be replaced (a second overload would overlap),
// so compile() renames every `x.matches(p)` call to this guarded function.
const guardedMatches = "runnelMatches"

function matchesGuarded(input: string, pattern: string): boolean {
  if (input.length > maxMatchInputChars) {
    throw new EvaluationError(
      `matches() looks at ${maxMatchInputChars} characters at most and got ${input.length}; match a shorter field (a header, payload.ref) instead of the whole body`,
    )
  }
  const verdict = cachedPattern(pattern)
  if (!verdict.ok) throw new EvaluationError(`matches() refused the pattern computed here: ${verdict.reason}`)
  return verdict.regexp.test(input)
}

const celEnvironments = new Map<ExpressionEnvironment, Environment>()
function celEnvironment(environment: ExpressionEnvironment): Environment {
  let env = celEnvironments.get(environment)
  if (env === undefined) {
    // A rule is a line or two; the limits keep a hostile one cheap to refuse.
    // Mixed list literals are list(dyn), as in the CEL specification and cel-go.
    env = new Environment({ homogeneousAggregateLiterals: false, limits: { maxAstNodes: 2000, maxDepth: 64 } })
    for (const [name, type] of Object.entries(declarations[environment])) env.registerVariable(name, type)
    env.registerFunction(`string.${guardedMatches}(string): bool`, matchesGuarded)
    env.registerFunction(`matches(string, string): bool`, matchesGuarded)
    celEnvironments.set(environment, env)
  }
  return env
}

/** Offset in `source` to 1-based line and column. */
export function positionAt(source: string, offset: number): SourcePosition {
  let line = 1
  let lineStart = 0
  const end = Math.min(Math.max(offset, 0), source.length)
  for (let at = 0; at < end; at++) {
    if (source[at] === "\n") {
      line++
      lineStart = at + 1
    }
  }
  return { line, column: end - lineStart + 1 }
}

type CelErrorLike = Error & { summary?: string; code?: string; range?: { start: number } }

function celSummary(error: unknown): { summary: string; code: string; offset: number | undefined } {
  if (!(error instanceof Error)) return { summary: String(error), code: "", offset: undefined }
  const celError = error as CelErrorLike
  const summary = (celError.summary ?? celError.message).replaceAll(guardedMatches, "matches")
  return { summary, code: celError.code ?? "", offset: celError.range?.start }
}

const hints: Record<string, (environment: ExpressionEnvironment) => string> = {
  unknown_variable: (environment) =>
    `; ${environment} expressions know ${Object.keys(declarations[environment]).join(", ")} (names are case-sensitive)`,
  no_such_key: () => `; test for it first with has(payload.key) or "key" in headers`,
  no_such_overload: () => "; check the types on both sides (strings need quotes)",
  no_matching_overload: () => "; check the function name and the types of its arguments",
}

function compileError(source: string, summary: string, offset: number | undefined, cause?: unknown): ExpressionError {
  const position = offset === undefined ? undefined : positionAt(source, offset)
  const where = position === undefined ? "" : ` at ${position.line}:${position.column}`
  return new ExpressionError("invalid_expression", `invalid expression${where}: ${summary}`, position, { cause })
}

function isNode(value: unknown): value is ASTNode {
  return typeof value === "object" && value !== null && "op" in value && "args" in value && "pos" in value
}

/**
 * Renames `matches` calls to the guarded function and checks literal patterns
 * now, so a bad pattern is refused when the rule is configured. The walk goes
 * through macro expansions (`exists`, `all`, ...) too.
 */
function guardMatches(root: ASTNode, source: string): void {
  const seen = new Set<unknown>()
  const visit = (value: unknown): void => {
    if (typeof value !== "object" || value === null || seen.has(value)) return
    seen.add(value)
    if (Array.isArray(value)) {
      for (const item of value) visit(item)
      return
    }
    if (!isNode(value)) {
      for (const item of Object.values(value)) visit(item)
      return
    }
    const node = value
    const alternate = (node as unknown as { meta?: { alternate?: unknown } }).meta?.alternate
    visit(alternate)
    if (node.op === "rcall" || node.op === "call") {
      const args = node.args as unknown[]
      const callArgs = (node.op === "rcall" ? args[2] : args[1]) as unknown[]
      const arity = node.op === "rcall" ? 1 : 2
      if ((args[0] === "matches" || args[0] === guardedMatches) && callArgs.length === arity) {
        if (node.op === "rcall") args[0] = guardedMatches
        const pattern = callArgs[arity - 1]
        if (isNode(pattern) && pattern.op === "value" && typeof pattern.args === "string") {
          const verdict = checkPattern(pattern.args)
          if (!verdict.ok) {
            throw compileError(
              source,
              `matches() refuses the pattern ${JSON.stringify(pattern.args)}: ${verdict.reason}`,
              pattern.start,
            )
          }
        }
      }
    }
    visit(node.args)
  }
  visit(root)
}

/**
 * Parses and type-checks `source` for `environment`. Throws ExpressionError
 * (status 400, code `invalid_expression`) with the line:column for a syntax
 * error, an unknown variable, a type error, a refused `matches` pattern, or a
 * result that is not bool. A `dyn` result (`payload.draft`) is accepted and
 * checked at evaluation.
 */
export function compileExpression<E extends ExpressionEnvironment>(environment: E, source: string): Expression<E> {
  if (typeof source !== "string") throw compileError("", "the expression must be a string", undefined)
  if (source.length > maxExpressionChars) {
    throw compileError(
      source,
      `the expression is ${source.length} characters long; the limit is ${maxExpressionChars}`,
      undefined,
    )
  }
  if (source.trim() === "")
    throw compileError(
      source,
      'the expression is empty; write a condition such as Email.endsWith("@example.com")',
      undefined,
    )
  const env = celEnvironment(environment)
  let parsed: ParseResult
  try {
    parsed = env.parse(source)
    guardMatches(parsed.ast, source)
  } catch (error) {
    if (error instanceof ExpressionError) throw error
    const { summary, offset } = celSummary(error)
    throw compileError(source, summary, offset, error)
  }
  const checked = parsed.check()
  if (!checked.valid) {
    const { summary, code, offset } = celSummary(checked.error)
    throw compileError(source, summary + (hints[code]?.(environment) ?? ""), offset, checked.error)
  }
  if (checked.type !== "bool" && checked.type !== "dyn") {
    throw compileError(
      source,
      `the expression gives a ${checked.type}, but a rule must give a bool (true or false); compare it, for example ${environment === "rbac" ? 'Email == "a@example.com"' : 'eventType == "push"'}`,
      0,
    )
  }
  const run = parsed
  return {
    environment,
    source,
    evaluate(variables, onError) {
      let result: unknown
      try {
        result = run(variables)
      } catch (error) {
        onError?.(evaluationError(source, environment, error))
        return false
      }
      if (result === true) return true
      if (result !== false) {
        onError?.(
          new ExpressionError(
            "expression_failed",
            `expression gave ${describe(result)}, not a bool; counted as false (compare it, for example payload.draft == true)`,
            positionAt(source, 0),
          ),
        )
      }
      return false
    },
  }
}

function describe(value: unknown): string {
  if (value === null) return "null"
  if (Array.isArray(value)) return "a list"
  if (typeof value === "bigint") return "an int"
  if (typeof value === "number") return "a double"
  return typeof value === "object" ? "a map" : `a ${typeof value}`
}

function evaluationError(source: string, environment: ExpressionEnvironment, error: unknown): ExpressionError {
  const { summary, code, offset } = celSummary(error)
  const position = offset === undefined ? undefined : positionAt(source, offset)
  const where = position === undefined ? "" : ` at ${position.line}:${position.column}`
  const hint = code === "no_such_key" || code === "unknown_variable" ? (hints[code]?.(environment) ?? "") : ""
  return new ExpressionError(
    "expression_failed",
    `expression failed${where}, counted as false: ${summary}${hint}`,
    position,
    {
      cause: error,
    },
  )
}

/** The `payload` variable: the body as JSON, or null when it is not JSON. */
export function webhookPayload(body: string): unknown {
  try {
    return JSON.parse(body)
  } catch {
    return null
  }
}
