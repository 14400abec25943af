import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { cpuMsOf } from "./cpu-time.fixture.ts"
import { compileExpression, ExpressionError, type RbacVariables, type WebhookVariables } from "./expression.ts"
import { checkPattern } from "./regex-guard.ts"

// Pieces of CEL, so random sources reach the parser's and checker's corners,
// not only its first "unexpected character".
const tokens = [
  "Email",
  "Groups",
  "Provider",
  "payload",
  "headers",
  "query",
  "body",
  "method",
  "x",
  "has(",
  "size(",
  ".matches(",
  ".endsWith(",
  ".exists(g, ",
  "in",
  "&&",
  "||",
  "!",
  "==",
  "!=",
  "<",
  "+",
  "?",
  ":",
  "(",
  ")",
  "[",
  "]",
  "{",
  "}",
  ",",
  ".",
  '"a"',
  "'b'",
  '"(a+)+"',
  '"^x.*y$"',
  "1",
  "2.5",
  "3u",
  "null",
  "true",
  "false",
  "b'x'",
  "r'\\d'",
  "\n",
  " ",
  "`",
  "\\",
  '"""',
  "dyn(",
  "int(",
  "[1, 'a']",
  "{'k': 1}",
  "g",
  ".all(",
  ".map(",
]
const source = fc.oneof(
  fc.string({ maxLength: 200 }),
  fc.array(fc.constantFrom(...tokens), { maxLength: 40 }).map((parts) => parts.join(" ")),
  fc.array(fc.constantFrom(...tokens), { maxLength: 40 }).map((parts) => parts.join("")),
)
const environment = fc.constantFrom("rbac" as const, "webhook" as const)

describe("compileExpression under random input", () => {
  it("throws nothing but ExpressionError, and quickly", () => {
    fc.assert(
      fc.property(environment, source, (name, text) => {
        const cpuMs = cpuMsOf(() => {
          try {
            compileExpression(name, text)
          } catch (error) {
            if (!(error instanceof ExpressionError)) throw error
            expect(error.status).toBe(400)
            expect(error.code).toBe("invalid_expression")
          }
        })
        expect(cpuMs).toBeLessThan(100)
      }),
      { numRuns: 3000 },
    )
  })

  it("checks random patterns without throwing or hanging", () => {
    const regexTokens = [
      "a",
      "b",
      ".",
      "*",
      "+",
      "?",
      "|",
      "(",
      ")",
      "[",
      "]",
      "^",
      "$",
      "\\d",
      "\\w",
      "\\1",
      "{2,}",
      "(?:",
      "(?=",
      "-",
      "\\",
    ]
    fc.assert(
      fc.property(fc.array(fc.constantFrom(...regexTokens), { maxLength: 16 }), (parts) => {
        const pattern = parts.join("")
        const verdict = checkPattern(pattern)
        if (!verdict.ok) return
        // Whatever the guard lets through stays fast on hostile input.
        for (const unit of ["a", "ab", "1", "a-", "_"]) {
          expect(
            cpuMsOf(() => verdict.regexp.test(`${unit.repeat(2048)}!`)),
            pattern,
          ).toBeLessThan(250)
        }
      }),
      { numRuns: 1500 },
    )
  })
})

const json = fc.jsonValue({ maxDepth: 4 })
const anything = fc.oneof(fc.anything({ maxDepth: 3 }), json, fc.constant(undefined), fc.constant(null))
const strings = fc.array(fc.string({ maxLength: 12 }), { maxLength: 5 })
const stringMap = fc.dictionary(fc.string({ maxLength: 12 }), fc.string({ maxLength: 12 }), { maxKeys: 5 })

const rbacRules = [
  '"deploy-team" in Groups && Email.endsWith("@corp.example") && Provider == "github"',
  'Groups.exists(g, g.matches("^deploy-"))',
  'size(Organizations) > 0 || NickName.startsWith("a")',
]
const webhookRules = [
  'headers["x-github-event"] == "push"',
  'has(payload.ref) && payload.ref == "refs/heads/main"',
  'payload.pull_request.labels.exists(l, l.name == "deploy")',
  "payload.number > 40 && query.branch.matches('^(main|dev)$')",
  'body.contains("x") || method == "POST"',
  "payload.draft",
]

describe("evaluate under random variables", () => {
  it("never throws for well-typed random RBAC users", () => {
    const user = fc.record({
      Email: fc.string(),
      Name: fc.string(),
      NickName: fc.string(),
      Provider: fc.string(),
      UserID: fc.string(),
      Organizations: strings,
      Groups: strings,
    })
    const rules = rbacRules.map((rule) => compileExpression("rbac", rule))
    fc.assert(
      fc.property(user, (variables: RbacVariables) => {
        for (const rule of rules) expect(typeof rule.evaluate(variables, () => {})).toBe("boolean")
      }),
    )
  })

  it("never throws for random webhook requests, JSON payloads and wrongly typed values", () => {
    const request = fc.record({
      provider: fc.oneof(fc.string(), anything),
      eventType: fc.string(),
      method: fc.string(),
      body: fc.oneof(fc.string(), anything),
      headers: fc.oneof(stringMap, anything),
      query: fc.oneof(stringMap, anything),
      payload: fc.oneof(json, anything),
    })
    const rules = webhookRules.map((rule) => compileExpression("webhook", rule))
    fc.assert(
      fc.property(request, (variables) => {
        for (const rule of rules) {
          const result = rule.evaluate(variables as WebhookVariables, (error) => {
            expect(error).toBeInstanceOf(ExpressionError)
          })
          expect(typeof result).toBe("boolean")
        }
      }),
      { numRuns: 500 },
    )
  })

  it("never throws when the variables themselves are not an object", () => {
    const rule = compileExpression("rbac", '"a" in Groups')
    fc.assert(
      fc.property(anything, (variables) => {
        expect(rule.evaluate(variables as RbacVariables, () => {})).toBe(false)
      }),
    )
  })
})
