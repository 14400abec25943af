import { describe, expect, it } from "vitest"
import { RunnelError } from "../core/errors.ts"
import {
  compileExpression,
  type ExpressionError,
  maxExpressionChars,
  positionAt,
  type RbacVariables,
  type WebhookVariables,
  webhookPayload,
} from "./expression.ts"

const alice: RbacVariables = {
  Email: "alice@corp.example",
  Name: "Alice Liddell",
  NickName: "alice",
  Provider: "github",
  UserID: "1001",
  Organizations: ["wonderland", "corp"],
  Groups: ["deploy-team", "readers"],
}
const bob: RbacVariables = {
  Email: "bob@gmail.example",
  Name: "Bob",
  NickName: "bob",
  Provider: "gitlab",
  UserID: "2002",
  Organizations: [],
  Groups: [],
}
const carol: RbacVariables = {
  ...bob,
  Email: "carol@corp.example",
  Provider: "oidc",
  NickName: "carol",
  Groups: ["admins"],
}

const pushBody = JSON.stringify({
  ref: "refs/heads/main",
  repository: { full_name: "corp/app", private: true },
  commits: [{ message: "fix [skip ci]" }, { message: "docs" }],
  pull_request: null,
  number: 42,
  head_commit: { author: { email: "alice@corp.example" } },
})
const push: WebhookVariables = {
  provider: "github",
  eventType: "push",
  method: "POST",
  body: pushBody,
  headers: { "x-github-event": "push", "content-type": "application/json" },
  query: { branch: "main" },
  payload: webhookPayload(pushBody),
}
const form: WebhookVariables = {
  provider: "generic",
  eventType: "",
  method: "GET",
  body: "a=1&b=2",
  headers: { "user-agent": "curl/8" },
  query: {},
  payload: webhookPayload("a=1&b=2"),
}
const opened = JSON.stringify({
  action: "opened",
  pull_request: { draft: false, labels: [{ name: "deploy" }], base: { ref: "main" } },
})
const pullRequest: WebhookVariables = {
  provider: "github",
  eventType: "pull_request",
  method: "POST",
  body: opened,
  headers: new Map([["x-github-event", "pull_request"]]),
  query: new Map([["env", "staging"]]),
  payload: webhookPayload(opened),
}

// [expression, variables, expected result, expect an evaluation error reported]
type RbacCase = [string, RbacVariables, boolean, boolean?]
const rbacCases: RbacCase[] = [
  ['"deploy-team" in Groups && Email.endsWith("@corp.example")', alice, true],
  ['"deploy-team" in Groups && Email.endsWith("@corp.example")', bob, false],
  ['"deploy-team" in Groups && Email.endsWith("@corp.example")', carol, false],
  ['"deploy-team" in Groups', bob, false],
  ["Groups == []", bob, true],
  ["size(Groups) == 0", bob, true],
  ["size(Groups) > 0", alice, true],
  ["Groups.size() == 2", alice, true],
  ['Email.endsWith("@corp.example")', carol, true],
  ['Email.endsWith("@x")', alice, false],
  ['Email.startsWith("alice@")', alice, true],
  ['Email.contains("@corp.")', alice, true],
  ['Provider == "github"', alice, true],
  ['Provider == "github"', bob, false],
  ['Provider != "github"', bob, true],
  ['Provider == "github" && "wonderland" in Organizations', alice, true],
  ['Provider == "github" && "wonderland" in Organizations', bob, false],
  ['NickName == "alice" || NickName == "bob"', bob, true],
  ['NickName in ["alice", "carol"]', carol, true],
  ['NickName in ["alice", "carol"]', bob, false],
  ['UserID == "1001"', alice, true],
  ['Name.startsWith("Alice")', alice, true],
  ['!("admins" in Groups)', alice, true],
  ['!("admins" in Groups)', carol, false],
  ['"admins" in Groups || ("deploy-team" in Groups && Provider == "github")', alice, true],
  ['"admins" in Groups || ("deploy-team" in Groups && Provider == "github")', carol, true],
  ['"admins" in Groups || ("deploy-team" in Groups && Provider == "github")', bob, false],
  ['Groups.exists(g, g.startsWith("deploy-"))', alice, true],
  ['Groups.exists(g, g.startsWith("deploy-"))', bob, false],
  ['Groups.all(g, g != "banned")', bob, true],
  ['Groups.all(g, g != "banned")', alice, true],
  ['Groups.exists_one(g, g.endsWith("-team"))', alice, true],
  ['Organizations.filter(o, o.startsWith("w")).size() == 1', alice, true],
  ['Groups.map(g, g.upperAscii()).exists(g, g == "READERS")', alice, true],
  ['Email.lowerAscii().endsWith("@corp.example")', { ...alice, Email: "ALICE@CORP.EXAMPLE" }, true],
  ['Email.matches("^[a-z.]+@corp\\\\.example$")', alice, true],
  ['Email.matches("^[a-z.]+@corp\\\\.example$")', bob, false],
  ['Email.matches("(?i)^ALICE@")', alice, true],
  ['matches(NickName, "^(alice|bob)$")', bob, true],
  ['Groups.exists(g, g.matches("^deploy-"))', alice, true],
  ['Email.split("@")[1] == "corp.example"', alice, true],
  ['Email.indexOf("@") > 0', alice, true],
  ['Email == "" ? false : true', alice, true],
  ['Email != "" && Name != ""', alice, true],
  ["true", bob, true],
  ["false", alice, false],
  ['Provider == "github" && Email.endsWith("@corp.example") && "deploy-team" in Groups', alice, true],
  // Values of the wrong shape (a caller's mistake) count as false and are reported.
  ['"deploy-team" in Groups', { ...alice, Groups: "deploy-team" } as unknown as RbacVariables, false, true],
  ['Email.endsWith("@corp.example")', { ...alice, Email: 42 } as unknown as RbacVariables, false, true],
  ['Groups[5] == "x"', alice, false, true],
  ['Email.substring(100) == ""', alice, false, true],
]

type WebhookCase = [string, WebhookVariables, boolean, boolean?]
const webhookCases: WebhookCase[] = [
  ['headers["x-github-event"] == "push"', push, true],
  ['headers["x-github-event"] == "push"', pullRequest, false],
  ['headers["x-github-event"] == "push"', form, false, true],
  ['"x-github-event" in headers && headers["x-github-event"] == "push"', form, false],
  ['has(headers.x) || "user-agent" in headers', form, true],
  ['has(payload.ref) && payload.ref == "refs/heads/main"', push, true],
  ['has(payload.ref) && payload.ref == "refs/heads/main"', pullRequest, false],
  ['has(payload.ref) && payload.ref == "refs/heads/main"', form, false],
  ['payload.ref == "refs/heads/main"', pullRequest, false, true],
  ['payload.ref.startsWith("refs/tags/")', push, false],
  ['payload.ref.matches("^refs/heads/(main|release-.+)$")', push, true],
  [
    'payload.ref.matches("^refs/heads/(main|release-.+)$")',
    { ...push, payload: { ref: "refs/heads/release-1.2" } },
    true,
  ],
  ['payload.ref.matches("^refs/heads/(main|release-.+)$")', { ...push, payload: { ref: "refs/heads/dev" } }, false],
  ["payload == null", form, true],
  ["payload != null", push, true],
  ['payload == null && body.contains("a=1")', form, true],
  ["has(payload.ref)", form, false],
  ['eventType == "push"', push, true],
  ['eventType == "pull_request" && payload.action == "opened"', pullRequest, true],
  ['eventType == "pull_request" && !payload.pull_request.draft', pullRequest, true],
  ["payload.pull_request.draft == false", pullRequest, true],
  ['payload.pull_request.labels.exists(l, l.name == "deploy")', pullRequest, true],
  ['payload.pull_request.base.ref == "main"', pullRequest, true],
  ['provider == "github"', push, true],
  ['provider == "generic" && method == "GET"', form, true],
  ['method == "POST"', push, true],
  ['method in ["POST", "PUT"]', form, false],
  ['query["branch"] == "main"', push, true],
  ['query.branch == "main"', push, true],
  ['query["env"] == "staging"', pullRequest, true],
  ['"env" in query', push, false],
  ['query["branch"] == "main"', form, false, true],
  ['has(query.branch) && query.branch == "main"', form, false],
  ["payload.number == 42", push, true],
  ["payload.number > 40", push, true],
  ["payload.number == 42.0", push, true],
  ["payload.repository.private", push, true],
  ['payload.repository.full_name == "corp/app"', push, true],
  ['payload.commits.exists(c, c.message.contains("[skip ci]"))', push, true],
  ['!payload.commits.exists(c, c.message.contains("[deploy]"))', push, true],
  ["size(payload.commits) == 2", push, true],
  ["payload.pull_request == null", push, true],
  ['payload.head_commit.author.email.endsWith("@corp.example")', push, true],
  ['headers["content-type"].startsWith("application/json")', push, true],
  ['body.contains("refs/heads/main")', push, true],
  ['body.matches("refs/heads/main")', push, true],
  ['body.matches("x")', { ...form, body: "y".repeat(5000) }, false, true],
  ['payload.missing == "x"', push, false, true],
  ['payload.ref == "refs/heads/main"', form, false, true],
  ['payload.number.startsWith("4")', push, false, true],
  ['payload.repository.full_name.matches(headers["x-github-event"])', push, false],
  [
    'payload.repository.full_name.matches(headers["x-pattern"])',
    { ...push, headers: { "x-pattern": "(a+)+$" } },
    false,
    true,
  ],
  ["payload.repository.private", { ...push, payload: { repository: { private: "yes" } } }, false, true],
  ['payload["constructor"] == null', push, false, true],
  ['headers["__proto__"] == ""', push, false, true],
  ['payload.ref == "refs/heads/main" || eventType == "ping"', { ...push, eventType: "ping", payload: {} }, true],
  ['eventType == "ping" || payload.ref == "refs/heads/main"', { ...push, eventType: "ping", payload: {} }, true],
]

describe("compileExpression: RBAC rules", () => {
  it.each(rbacCases)("%s -> %s", (source, user, expected, reportsError = false) => {
    const errors: ExpressionError[] = []
    expect(compileExpression("rbac", source).evaluate(user, (error) => errors.push(error))).toBe(expected)
    expect(errors.length > 0).toBe(reportsError)
    for (const error of errors) expect(error.code).toBe("expression_failed")
  })
})

describe("compileExpression: webhook conditions", () => {
  it.each(webhookCases)("%s -> %s", (source, request, expected, reportsError = false) => {
    const errors: ExpressionError[] = []
    expect(compileExpression("webhook", source).evaluate(request, (error) => errors.push(error))).toBe(expected)
    expect(errors.map((error) => error.message).length > 0).toBe(reportsError)
  })

  it("reports a missing key with its position and a way to test for it", () => {
    const errors: ExpressionError[] = []
    compileExpression("webhook", 'eventType == "push" &&\n  headers["x-missing"] == "a"').evaluate(push, (error) =>
      errors.push(error),
    )
    expect(errors[0]?.message).toMatch(
      /^expression failed at 2:3, counted as false: No such key: x-missing; test for it/,
    )
    expect(errors[0]?.position).toEqual({ line: 2, column: 3 })
  })

  it("reports a dyn result that is not a bool", () => {
    const errors: ExpressionError[] = []
    expect(compileExpression("webhook", "payload.ref").evaluate(push, (error) => errors.push(error))).toBe(false)
    expect(errors[0]?.message).toContain("expression gave a string, not a bool")
  })

  it("gives null as payload when the body is not JSON", () => {
    expect(webhookPayload("not json")).toBeNull()
    expect(webhookPayload("")).toBeNull()
    expect(webhookPayload('{"a":1}')).toEqual({ a: 1 })
  })

  it("evaluates without an onError callback", () => {
    expect(compileExpression("webhook", 'payload.missing == "x"').evaluate(push)).toBe(false)
  })
})

// [environment, expression, the start of the message after "invalid expression"]
type CompileErrorCase = ["rbac" | "webhook", string, string]
const compileErrors: CompileErrorCase[] = [
  ["rbac", 'Emali == "x"', " at 1:1: Unknown variable: Emali; rbac expressions know Email, Name"],
  ["rbac", 'email.endsWith("@x")', " at 1:1: Unknown variable: email"],
  ["rbac", '"team" in groups', " at 1:11: Unknown variable: groups"],
  ["rbac", 'user.email == "x"', " at 1:1: Unknown variable: user"],
  ["webhook", 'Email == "x"', " at 1:1: Unknown variable: Email; webhook expressions know provider, eventType"],
  ["rbac", 'headers["x"] == "y"', " at 1:1: Unknown variable: headers"],
  ["rbac", "Email ==", " at 1:9: Unexpected token: EOF"],
  ["rbac", '"deploy-team" in Groups &&', " at 1:27: Unexpected token: EOF"],
  ["rbac", 'Email == "x', " at 1:10: Unterminated string"],
  ["rbac", "Email = 'x'", " at 1:7"],
  ["rbac", '"a" in Groups and Email == "b"', " at 1:15"],
  ["rbac", "(Email == 'x'", " at 1:14"],
  ["rbac", 'Email == "x")', " at 1:13"],
  ["webhook", 'eventType == "push"\n  && headers["x"] == ', " at 2:22: Unexpected token: EOF"],
  ["rbac", "Email + 1 == 2", " at 1:1: no such overload: string + int"],
  ["rbac", "Email == 1", " at 1:1: no such overload: string == int"],
  ["rbac", 'Groups == "a"', " at 1:1: no such overload: list<string> == string"],
  ["rbac", '"a" in Email', " at 1:1"],
  ["rbac", "Email.endsWith(1)", " at 1:1: found no matching overload for 'string.endsWith(int)'"],
  ["rbac", 'Email.endswith("x")', " at 1:1: found no matching overload for 'string.endswith(string)'"],
  ["rbac", "Email.matches(1)", " at 1:1: found no matching overload for 'string.matches(int)'"],
  ["rbac", "Email", " at 1:1: the expression gives a string, but a rule must give a bool"],
  ["rbac", "Groups", " at 1:1: the expression gives a list<string>, but a rule must give a bool"],
  ["rbac", "size(Groups)", " at 1:1: the expression gives a int, but a rule must give a bool"],
  ["webhook", "headers", " at 1:1: the expression gives a map<string, string>"],
  ["webhook", 'headers["x"]', " at 1:1: the expression gives a string"],
  ["rbac", "Email && true", " at 1:1: Logical operator requires bool operands, got 'string'"],
  ["rbac", 'Email.matches("(a+)+$")', ' at 1:15: matches() refuses the pattern "(a+)+$": the repeated group (a+)+'],
  ["rbac", 'Email.matches("(a*)*")', ' at 1:15: matches() refuses the pattern "(a*)*"'],
  ["rbac", 'Email.matches("(a|a)*b")', ' at 1:15: matches() refuses the pattern "(a|a)*b": its alternatives'],
  [
    "rbac",
    'Email.matches("(x)\\\\1")',
    ' at 1:15: matches() refuses the pattern "(x)\\\\1": backreferences are not supported',
  ],
  [
    "rbac",
    'Email.matches("[a-z")',
    ' at 1:15: matches() refuses the pattern "[a-z": it is not a valid regular expression',
  ],
  ["webhook", 'body.matches(".*a.*b")', ' at 1:14: matches() refuses the pattern ".*a.*b": the repeats .* and .*'],
  ["webhook", 'payload.ref.matches("(?=main)")', ' at 1:21: matches() refuses the pattern "(?=main)": lookahead'],
  ["rbac", 'Groups.exists(g, g.matches("(\\\\w+\\\\s?)+$"))', " at 1:28: matches() refuses the pattern"],
  ["rbac", 'matches(Email, "(a+)+")', " at 1:16: matches() refuses the pattern"],
  ["rbac", "", ": the expression is empty"],
  ["rbac", "   ", ": the expression is empty"],
]

describe("compileExpression: refused at compile time", () => {
  it.each(compileErrors)("%s: %s", (environment, source, message) => {
    let thrown: unknown
    try {
      compileExpression(environment, source)
    } catch (error) {
      thrown = error
    }
    expect(thrown).toBeInstanceOf(RunnelError)
    expect(thrown).toMatchObject({ name: "ExpressionError", status: 400, code: "invalid_expression" })
    expect((thrown as Error).message).toContain(`invalid expression${message}`)
  })

  it("refuses an expression longer than the limit", () => {
    expect(() => compileExpression("rbac", `Email == "${"x".repeat(maxExpressionChars)}"`)).toThrow(/the limit is 4096/)
  })

  it("gives the position as line and column", () => {
    expect(positionAt("a\nbc\ndef", 0)).toEqual({ line: 1, column: 1 })
    expect(positionAt("a\nbc\ndef", 3)).toEqual({ line: 2, column: 2 })
    expect(positionAt("a\nbc\ndef", 7)).toEqual({ line: 3, column: 3 })
  })

  it("keeps the source and the environment", () => {
    const expression = compileExpression("rbac", "true")
    expect(expression).toMatchObject({ source: "true", environment: "rbac" })
  })
})
