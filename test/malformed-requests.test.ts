import { request } from "node:http"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type Answer, call, eventually, type ServerProcess, serverProcesses } from "./server-process.ts"

// Malformed requests to every endpoint of one `runnel server` (bin/runnel in its own process, native
// driver, --max-body-mb 1): each is refused with the status contract.md section 4 gives and a JSON
// {"error"} naming what is wrong, never a 500; afterwards the server is alive, logged no stack trace,
// and stored nothing. Requests go out through node:http, not fetch, so that paths reach the server
// as written (fetch would resolve `..` and re-encode) and methods fetch forbids can be sent.
const servers = serverProcesses("runnel-malformed-test-")
afterAll(() => servers.cleanUp())

/** One malformed request. `{run}` in a path is the fixture's finished run. */
type Row = {
  /** What is wrong, for the test's name. */
  what: string
  method: string
  path: string
  /** Sent as JSON with Content-Type application/json. */
  json?: unknown
  /** Sent as written, with Content-Type application/json unless `headers` says otherwise. */
  raw?: string
  headers?: Record<string, string>
  /** Send the body in chunks without Content-Length. */
  chunked?: boolean
  status: number
  /** The `error` message must match: it names what was wrong. */
  error: RegExp
}

const script = "export const pipeline = async () => {}\n"
const fixture = "/api/pipelines/fixture"
const run = "/api/runs/{run}"
const twoMiB = JSON.stringify({ content: `// ${"x".repeat(2 * 1024 * 1024)}\n${script}` })
const deep = (levels: number) => `${'{"a":'.repeat(levels)}1${"}".repeat(levels)}`
const long = (length: number) => "a".repeat(length)
const tooLarge = /the request body is larger than 1048576 bytes; the server's --max-body-mb sets the limit/
const notJson = /the request body is not valid JSON/
const empty = /the request body is empty; send a JSON object/
const notJsonType =
  /the request body is sent as "[^"]+"; this API takes JSON: send it with Content-Type: application\/json/
const tooDeep = /the request body nests arrays and objects more than \d+ levels deep/
const badName = (name: string) =>
  new RegExp(
    `pipeline name "${name.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}" is not valid: use lowercase letters, digits, "-" and "\\.", start and end with a letter or digit, at most 63 characters`,
  )
const noRoute = (method: string, path: string) => new RegExp(`^no route for ${method} ${path.replace(/[.?]/g, "\\$&")}`)
const notAllowed = (method: string) => new RegExp(`does not answer ${method}; it answers [A-Z]`)
const pipelineNotFound = (key: string) => new RegExp(`^pipeline "${key}" not found$`)
const runNotFound = (key: string) => new RegExp(`^run "${key.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}" not found$`)
const badPage = /is not valid; (page|per_page) is a whole number from 1/

const rows: Row[] = [
  // Routes that do not exist, and methods a path does not take.
  { what: "unknown route", method: "GET", path: "/nothing", status: 404, error: noRoute("GET", "/nothing") },
  { what: "unknown route", method: "GET", path: "/api", status: 404, error: noRoute("GET", "/api") },
  {
    what: "unknown route",
    method: "GET",
    path: "/api/nothing-here",
    status: 404,
    error: noRoute("GET", "/api/nothing-here"),
  },
  {
    what: "unknown route",
    method: "POST",
    path: "/api/nothing-here",
    json: {},
    status: 404,
    error: noRoute("POST", "/api/nothing-here"),
  },
  {
    what: "unknown sub-route",
    method: "GET",
    path: `${fixture}/bogus`,
    status: 404,
    error: noRoute("GET", `${fixture}/bogus`),
  },
  {
    what: "unknown sub-route",
    method: "GET",
    path: `${run}/bogus`,
    status: 404,
    error: /^no route for GET \/api\/runs\//,
  },
  {
    what: "empty path segment",
    method: "GET",
    path: "/api/runs//status",
    status: 404,
    error: noRoute("GET", "/api/runs//status"),
  },
  { what: "doubled slash", method: "GET", path: "//api/pipelines", status: 404, error: /^no route for GET \/\/api/ },
  {
    what: "raw .. segment",
    method: "GET",
    path: "/api/pipelines/../runs",
    status: 404,
    error: noRoute("GET", "/api/pipelines/../runs"),
  },
  { what: "wrong method on /health", method: "POST", path: "/health", json: {}, status: 405, error: /POST/ },
  { what: "wrong method on /health", method: "DELETE", path: "/health", status: 405, error: /DELETE/ },
  { what: "wrong method", method: "PATCH", path: "/api/pipelines", json: {}, status: 405, error: notAllowed("PATCH") },
  { what: "wrong method", method: "DELETE", path: "/api/pipelines", status: 405, error: notAllowed("DELETE") },
  { what: "wrong method", method: "PUT", path: "/api/pipelines", json: {}, status: 405, error: notAllowed("PUT") },
  {
    what: "wrong method",
    method: "POST",
    path: fixture,
    json: { content: script },
    status: 405,
    error: notAllowed("POST"),
  },
  { what: "wrong method", method: "PATCH", path: fixture, json: {}, status: 405, error: notAllowed("PATCH") },
  { what: "wrong method", method: "GET", path: `${fixture}/run`, status: 405, error: notAllowed("GET") },
  { what: "wrong method", method: "GET", path: `${fixture}/trigger`, status: 405, error: notAllowed("GET") },
  { what: "wrong method", method: "DELETE", path: `${fixture}/trigger`, status: 405, error: notAllowed("DELETE") },
  { what: "wrong method", method: "PUT", path: `${fixture}/pause`, json: {}, status: 405, error: notAllowed("PUT") },
  { what: "wrong method", method: "GET", path: `${fixture}/unpause`, status: 405, error: notAllowed("GET") },
  {
    what: "wrong method",
    method: "POST",
    path: `${fixture}/secrets`,
    json: {},
    status: 405,
    error: notAllowed("POST"),
  },
  {
    what: "wrong method",
    method: "PUT",
    path: `${fixture}/secrets/API_TOKEN`,
    json: "v",
    status: 405,
    error: notAllowed("PUT"),
  },
  { what: "wrong method", method: "POST", path: "/api/runs", json: {}, status: 405, error: notAllowed("POST") },
  { what: "wrong method", method: "DELETE", path: run, status: 405, error: notAllowed("DELETE") },
  { what: "wrong method", method: "PUT", path: `${run}/status`, json: {}, status: 405, error: notAllowed("PUT") },
  { what: "wrong method", method: "POST", path: `${run}/tasks`, json: {}, status: 405, error: notAllowed("POST") },
  { what: "wrong method", method: "POST", path: `${run}/gates`, json: {}, status: 405, error: notAllowed("POST") },
  { what: "wrong method", method: "GET", path: `${run}/stop`, status: 405, error: notAllowed("GET") },
  { what: "wrong method", method: "POST", path: `${run}/events`, status: 405, error: notAllowed("POST") },
  { what: "wrong method", method: "POST", path: "/api/features", json: {}, status: 405, error: notAllowed("POST") },
  { what: "wrong method", method: "DELETE", path: "/api/drivers", status: 405, error: notAllowed("DELETE") },
  {
    what: "method no route takes",
    method: "PROPFIND",
    path: "/api/pipelines",
    status: 405,
    error: notAllowed("PROPFIND"),
  },
  { what: "method no route takes", method: "TRACE", path: fixture, status: 405, error: notAllowed("TRACE") },
  {
    what: "method no route takes, unknown route",
    method: "PROPFIND",
    path: "/api/nothing-here",
    status: 404,
    error: noRoute("PROPFIND", "/api/nothing-here"),
  },
  // Node's parser refuses a method it does not know before any route sees it.
  { what: "unknown HTTP method", method: "BREW", path: "/api/pipelines", status: 400, error: /method/i },

  // PUT /api/pipelines/:name: bodies.
  { what: "invalid JSON", method: "PUT", path: fixture, raw: "{not json", status: 400, error: notJson },
  { what: "trailing comma", method: "PUT", path: fixture, raw: '{"content": "x",}', status: 400, error: notJson },
  { what: "truncated JSON", method: "PUT", path: fixture, raw: '{"content": "x', status: 400, error: notJson },
  { what: "byte order mark", method: "PUT", path: fixture, raw: `\ufeff{"content":"x"}`, status: 400, error: notJson },
  { what: "empty body", method: "PUT", path: fixture, raw: "", status: 400, error: empty },
  { what: "blank body", method: "PUT", path: fixture, raw: "  \n\t ", status: 400, error: empty },
  {
    what: "array body",
    method: "PUT",
    path: fixture,
    json: [1, 2],
    status: 400,
    error: /must be a JSON object, not an array/,
  },
  {
    what: "string body",
    method: "PUT",
    path: fixture,
    json: "text",
    status: 400,
    error: /must be a JSON object, not a string/,
  },
  {
    what: "number body",
    method: "PUT",
    path: fixture,
    json: 42,
    status: 400,
    error: /must be a JSON object, not a number/,
  },
  {
    what: "null body",
    method: "PUT",
    path: fixture,
    json: null,
    status: 400,
    error: /must be a JSON object, not null/,
  },
  {
    what: "boolean body",
    method: "PUT",
    path: fixture,
    json: true,
    status: 400,
    error: /must be a JSON object, not a boolean/,
  },
  {
    what: "huge string body",
    method: "PUT",
    path: fixture,
    json: long(900_000),
    status: 400,
    error: /^the request body must be a JSON object, not a string$/,
  },
  { what: "no content", method: "PUT", path: fixture, json: {}, status: 400, error: /"content" is required/ },
  {
    what: "content a number",
    method: "PUT",
    path: fixture,
    json: { content: 5 },
    status: 400,
    error: /"content" is required/,
  },
  {
    what: "content empty",
    method: "PUT",
    path: fixture,
    json: { content: " " },
    status: 400,
    error: /"content" is required/,
  },
  {
    what: "content an array",
    method: "PUT",
    path: fixture,
    json: { content: [script] },
    status: 400,
    error: /"content" is required/,
  },
  {
    what: "content that does not compile",
    method: "PUT",
    path: fixture,
    json: { content: "this is ( not typescript" },
    status: 400,
    error: /fixture\.ts:1:\d+: Expected/,
  },
  {
    what: "driver a number",
    method: "PUT",
    path: fixture,
    json: { content: script, driver: 3 },
    status: 400,
    error: /"driver" must be a string/,
  },
  {
    what: "driver unknown",
    method: "PUT",
    path: fixture,
    json: { content: script, driver: "podman" },
    status: 400,
    error: /driver "podman" is not allowed on this server; allowed: /,
  },
  {
    what: "driver_config an array",
    method: "PUT",
    path: fixture,
    json: { content: script, driver_config: [] },
    status: 400,
    error: /"driver_config" must be a JSON object/,
  },
  {
    what: "driver_config a string",
    method: "PUT",
    path: fixture,
    json: { content: script, driver_config: "host=x" },
    status: 400,
    error: /"driver_config" must be a JSON object/,
  },
  {
    what: "rbac_expression a number",
    method: "PUT",
    path: fixture,
    json: { content: script, rbac_expression: 1 },
    status: 400,
    error: /"rbac_expression" must be a string/,
  },
  {
    what: "webhook_secret a number",
    method: "PUT",
    path: fixture,
    json: { content: script, webhook_secret: 5 },
    status: 400,
    error: /"webhook_secret" must be a string/,
  },
  {
    what: "secrets an array",
    method: "PUT",
    path: fixture,
    json: { content: script, secrets: ["A=b"] },
    status: 400,
    error: /"secrets" must be an object of names to string values/,
  },
  {
    what: "secret value a number",
    method: "PUT",
    path: fixture,
    json: { content: script, secrets: { API_TOKEN: 5 } },
    status: 400,
    error: /secret "API_TOKEN" must have a string value/,
  },
  {
    what: "secret name not a variable name",
    method: "PUT",
    path: fixture,
    json: { content: script, secrets: { "1-bad key": "v" } },
    status: 400,
    error: /secret name "1-bad key" is not valid/,
  },
  {
    what: "content_type unknown",
    method: "PUT",
    path: fixture,
    json: { content: script, content_type: "py" },
    status: 400,
    error: /"content_type" "py" is not known; use ts, js or yaml/,
  },
  {
    what: "content_type a number",
    method: "PUT",
    path: fixture,
    json: { content: script, content_type: 5 },
    status: 400,
    error: /"content_type" 5 is not known/,
  },
  {
    what: "unknown field",
    method: "PUT",
    path: fixture,
    json: { content: script, colour: "red" },
    status: 400,
    error: /unknown field "colour"; known: content, /,
  },
  {
    what: "unknown fields",
    method: "PUT",
    path: fixture,
    json: { content: script, colour: "red", size: 2 },
    status: 400,
    error: /unknown fields "colour", "size"; known: /,
  },
  {
    what: "name in a PUT body",
    method: "PUT",
    path: fixture,
    json: { content: script, name: "other" },
    status: 400,
    error: /unknown field "name"/,
  },
  {
    what: "__proto__ field",
    method: "PUT",
    path: fixture,
    raw: `{"content": ${JSON.stringify(script)}, "__proto__": {"admin": true}}`,
    status: 400,
    error: /unknown field "__proto__"/,
  },
  {
    what: "deeply nested driver_config",
    method: "PUT",
    path: fixture,
    raw: `{"content": ${JSON.stringify(script)}, "driver_config": ${deep(100_000)}}`,
    status: 400,
    error: tooDeep,
  },
  {
    what: "deeply nested array",
    method: "PUT",
    path: fixture,
    raw: `${"[".repeat(100_000)}${"]".repeat(100_000)}`,
    status: 400,
    error: tooDeep,
  },
  {
    what: "text/plain",
    method: "PUT",
    path: fixture,
    raw: JSON.stringify({ content: script }),
    headers: { "Content-Type": "text/plain" },
    status: 415,
    error: notJsonType,
  },
  {
    what: "form-encoded",
    method: "PUT",
    path: fixture,
    raw: "content=x",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    status: 415,
    error: notJsonType,
  },
  {
    what: "multipart",
    method: "PUT",
    path: fixture,
    raw: '--b\r\nContent-Disposition: form-data; name="content"\r\n\r\nx\r\n--b--\r\n',
    headers: { "Content-Type": "multipart/form-data; boundary=b" },
    status: 415,
    error: notJsonType,
  },
  { what: "2 MiB body", method: "PUT", path: fixture, raw: twoMiB, status: 413, error: tooLarge },
  {
    what: "2 MiB chunked body",
    method: "PUT",
    path: fixture,
    raw: twoMiB,
    chunked: true,
    status: 413,
    error: tooLarge,
  },

  // PUT /api/pipelines/:name: names.
  {
    what: "uppercase name",
    method: "PUT",
    path: "/api/pipelines/Upper",
    json: { content: script },
    status: 400,
    error: badName("Upper"),
  },
  {
    what: "64-char name",
    method: "PUT",
    path: `/api/pipelines/${long(64)}`,
    json: { content: script },
    status: 400,
    error: badName(long(64)),
  },
  {
    what: "8000-char name",
    method: "PUT",
    path: `/api/pipelines/${long(8000)}`,
    json: { content: script },
    status: 400,
    error: /at most 63 characters/,
  },
  {
    what: "encoded slash",
    method: "PUT",
    path: "/api/pipelines/a%2Fb",
    json: { content: script },
    status: 400,
    error: badName("a/b"),
  },
  {
    what: "unicode name",
    method: "PUT",
    path: "/api/pipelines/caf%C3%A9",
    json: { content: script },
    status: 400,
    error: badName("café"),
  },
  {
    what: "raw .. name",
    method: "PUT",
    path: "/api/pipelines/..",
    json: { content: script },
    status: 400,
    error: badName(".."),
  },
  {
    what: "encoded .. name",
    method: "PUT",
    path: "/api/pipelines/%2e%2e",
    json: { content: script },
    status: 400,
    error: badName(".."),
  },
  {
    what: "bad percent-encoding",
    method: "PUT",
    path: "/api/pipelines/%zz",
    json: { content: script },
    status: 400,
    error: badName("%zz"),
  },
  {
    what: "NUL in name",
    method: "PUT",
    path: "/api/pipelines/a%00b",
    json: { content: script },
    status: 400,
    error: /pipeline name "a.*b" is not valid/,
  },
  {
    what: "leading dash",
    method: "PUT",
    path: "/api/pipelines/-dash",
    json: { content: script },
    status: 400,
    error: badName("-dash"),
  },
  {
    what: "trailing dot",
    method: "PUT",
    path: "/api/pipelines/dot.",
    json: { content: script },
    status: 400,
    error: badName("dot."),
  },
  {
    what: "underscore",
    method: "PUT",
    path: "/api/pipelines/a_b",
    json: { content: script },
    status: 400,
    error: badName("a_b"),
  },
  {
    what: "space",
    method: "PUT",
    path: "/api/pipelines/a%20b",
    json: { content: script },
    status: 400,
    error: badName("a b"),
  },

  // POST /api/pipelines.
  { what: "invalid JSON", method: "POST", path: "/api/pipelines", raw: "{", status: 400, error: notJson },
  { what: "empty body", method: "POST", path: "/api/pipelines", raw: "", status: 400, error: empty },
  {
    what: "array body",
    method: "POST",
    path: "/api/pipelines",
    json: [],
    status: 400,
    error: /must be a JSON object, not an array/,
  },
  {
    what: "no name",
    method: "POST",
    path: "/api/pipelines",
    json: { content: script },
    status: 400,
    error: /"name" is required/,
  },
  {
    what: "name a number",
    method: "POST",
    path: "/api/pipelines",
    json: { name: 5, content: script },
    status: 400,
    error: /"name" is required/,
  },
  {
    what: "uppercase name",
    method: "POST",
    path: "/api/pipelines",
    json: { name: "Upper", content: script },
    status: 400,
    error: badName("Upper"),
  },
  {
    what: "64-char name",
    method: "POST",
    path: "/api/pipelines",
    json: { name: long(64), content: script },
    status: 400,
    error: badName(long(64)),
  },
  {
    what: "name with a slash",
    method: "POST",
    path: "/api/pipelines",
    json: { name: "../x", content: script },
    status: 400,
    error: badName("../x"),
  },
  {
    what: "unicode name",
    method: "POST",
    path: "/api/pipelines",
    json: { name: "ñandú", content: script },
    status: 400,
    error: badName("ñandú"),
  },
  {
    what: "no content",
    method: "POST",
    path: "/api/pipelines",
    json: { name: "fresh" },
    status: 400,
    error: /"content" is required/,
  },
  {
    what: "unknown field",
    method: "POST",
    path: "/api/pipelines",
    json: { name: "fresh", content: script, bogus: 1 },
    status: 400,
    error: /unknown field "bogus"; known: (.*, )?name(,|$)/,
  },
  {
    what: "existing name",
    method: "POST",
    path: "/api/pipelines",
    json: { name: "fixture", content: script },
    status: 409,
    error: /pipeline "fixture" already exists; update it with PUT/,
  },
  {
    what: "text/plain",
    method: "POST",
    path: "/api/pipelines",
    raw: JSON.stringify({ name: "fresh", content: script }),
    headers: { "Content-Type": "text/plain;charset=UTF-8" },
    status: 415,
    error: notJsonType,
  },
  { what: "2 MiB body", method: "POST", path: "/api/pipelines", raw: twoMiB, status: 413, error: tooLarge },

  // POST /api/pipelines/:id/trigger.
  { what: "invalid JSON", method: "POST", path: `${fixture}/trigger`, raw: "{", status: 400, error: notJson },
  {
    what: "array body",
    method: "POST",
    path: `${fixture}/trigger`,
    json: [],
    status: 400,
    error: /must be a JSON object, not an array/,
  },
  {
    what: "string body",
    method: "POST",
    path: `${fixture}/trigger`,
    json: "manual",
    status: 400,
    error: /must be a JSON object, not a string/,
  },
  {
    what: "null body",
    method: "POST",
    path: `${fixture}/trigger`,
    json: null,
    status: 400,
    error: /must be a JSON object, not null/,
  },
  {
    what: "unknown mode",
    method: "POST",
    path: `${fixture}/trigger`,
    json: { mode: "cron" },
    status: 400,
    error: /"mode" "cron" is not a trigger mode; known: manual, args, webhook/,
  },
  {
    what: "mode in capitals",
    method: "POST",
    path: `${fixture}/trigger`,
    json: { mode: "MANUAL" },
    status: 400,
    error: /"mode" "MANUAL" is not a trigger mode/,
  },
  {
    what: "mode a number",
    method: "POST",
    path: `${fixture}/trigger`,
    json: { mode: 5 },
    status: 400,
    error: /"mode" 5 is not a trigger mode/,
  },
  {
    what: "deeply nested mode",
    method: "POST",
    path: `${fixture}/trigger`,
    raw: `{"mode": ${deep(100_000)}}`,
    status: 400,
    error: tooDeep,
  },
  {
    what: "args a string",
    method: "POST",
    path: `${fixture}/trigger`,
    json: { args: "a" },
    status: 400,
    error: /"args" must be an array of strings/,
  },
  {
    what: "args numbers",
    method: "POST",
    path: `${fixture}/trigger`,
    json: { mode: "args", args: [1, 2] },
    status: 400,
    error: /"args" must be an array of strings/,
  },
  {
    what: "args null item",
    method: "POST",
    path: `${fixture}/trigger`,
    json: { args: ["a", null] },
    status: 400,
    error: /"args" must be an array of strings/,
  },
  {
    what: "args an object",
    method: "POST",
    path: `${fixture}/trigger`,
    json: { args: { a: "b" } },
    status: 400,
    error: /"args" must be an array of strings/,
  },
  {
    what: "unknown field",
    method: "POST",
    path: `${fixture}/trigger`,
    json: { when: "now" },
    status: 400,
    error: /unknown field "when"; known: mode, args, webhook/,
  },
  {
    what: "webhook mode without a webhook secret",
    method: "POST",
    path: `${fixture}/trigger`,
    json: { mode: "webhook" },
    status: 403,
    error: /pipeline "fixture" has no webhook_secret/,
  },
  {
    what: "text/plain",
    method: "POST",
    path: `${fixture}/trigger`,
    raw: "{}",
    headers: { "Content-Type": "text/plain" },
    status: 415,
    error: notJsonType,
  },
  { what: "2 MiB body", method: "POST", path: `${fixture}/trigger`, raw: twoMiB, status: 413, error: tooLarge },

  // POST /api/pipelines/:name/run: refused before any stream starts.
  { what: "invalid JSON", method: "POST", path: `${fixture}/run`, raw: "{", status: 400, error: notJson },
  {
    what: "array body",
    method: "POST",
    path: `${fixture}/run`,
    json: ["a"],
    status: 400,
    error: /must be a JSON object, not an array/,
  },
  {
    what: "args a string",
    method: "POST",
    path: `${fixture}/run`,
    json: { args: "x" },
    status: 400,
    error: /"args" must be an array of strings/,
  },
  {
    what: "args numbers",
    method: "POST",
    path: `${fixture}/run`,
    json: { args: [1] },
    status: 400,
    error: /"args" must be an array of strings/,
  },
  {
    what: "unknown field",
    method: "POST",
    path: `${fixture}/run`,
    json: { mode: "manual" },
    status: 400,
    error: /unknown field "mode"; known: args/,
  },
  {
    what: "form-encoded",
    method: "POST",
    path: `${fixture}/run`,
    raw: "args=a",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    status: 415,
    error: notJsonType,
  },
  { what: "2 MiB body", method: "POST", path: `${fixture}/run`, raw: twoMiB, status: 413, error: tooLarge },

  // Bodies of the actions that take none are still JSON.
  { what: "invalid JSON", method: "POST", path: `${fixture}/pause`, raw: "{", status: 400, error: notJson },
  {
    what: "text/plain",
    method: "POST",
    path: `${fixture}/unpause`,
    raw: "now",
    headers: { "Content-Type": "text/plain" },
    status: 415,
    error: notJsonType,
  },
  { what: "invalid JSON", method: "POST", path: `${run}/stop`, raw: "{", status: 400, error: notJson },

  // Pipelines and runs that do not exist.
  {
    what: "unknown pipeline",
    method: "GET",
    path: "/api/pipelines/nope",
    status: 404,
    error: pipelineNotFound("nope"),
  },
  {
    what: "unknown pipeline id",
    method: "GET",
    path: "/api/pipelines/00000000-0000-0000-0000-000000000000",
    status: 404,
    error: pipelineNotFound("00000000-0000-0000-0000-000000000000"),
  },
  {
    what: "unknown pipeline",
    method: "DELETE",
    path: "/api/pipelines/nope",
    status: 404,
    error: pipelineNotFound("nope"),
  },
  {
    what: "unknown pipeline",
    method: "POST",
    path: "/api/pipelines/nope/pause",
    status: 404,
    error: pipelineNotFound("nope"),
  },
  {
    what: "unknown pipeline",
    method: "POST",
    path: "/api/pipelines/nope/unpause",
    status: 404,
    error: pipelineNotFound("nope"),
  },
  {
    what: "unknown pipeline",
    method: "POST",
    path: "/api/pipelines/nope/trigger",
    status: 404,
    error: pipelineNotFound("nope"),
  },
  {
    what: "unknown pipeline",
    method: "POST",
    path: "/api/pipelines/nope/trigger",
    json: { mode: "args", args: ["a"] },
    status: 404,
    error: pipelineNotFound("nope"),
  },
  {
    what: "unknown pipeline",
    method: "POST",
    path: "/api/pipelines/nope/run",
    status: 404,
    error: pipelineNotFound("nope"),
  },
  {
    what: "unknown pipeline",
    method: "GET",
    path: "/api/pipelines/nope/secrets",
    status: 404,
    error: pipelineNotFound("nope"),
  },
  {
    what: "unknown pipeline",
    method: "DELETE",
    path: "/api/pipelines/nope/secrets/API_TOKEN",
    status: 404,
    error: pipelineNotFound("nope"),
  },
  {
    what: "unknown secret",
    method: "DELETE",
    path: `${fixture}/secrets/NO_SUCH_KEY`,
    status: 404,
    error: /^secret "NO_SUCH_KEY" not found/,
  },
  { what: "unknown run", method: "GET", path: "/api/runs/nope", status: 404, error: runNotFound("nope") },
  { what: "unknown run", method: "GET", path: "/api/runs/nope/status", status: 404, error: runNotFound("nope") },
  { what: "unknown run", method: "GET", path: "/api/runs/nope/tasks", status: 404, error: runNotFound("nope") },
  { what: "unknown run", method: "GET", path: "/api/runs/nope/gates", status: 404, error: runNotFound("nope") },
  { what: "unknown run", method: "GET", path: "/api/runs/nope/events", status: 404, error: runNotFound("nope") },
  {
    what: "unknown run with a Last-Event-ID",
    method: "GET",
    path: "/api/runs/nope/events",
    headers: { "Last-Event-ID": "3" },
    status: 404,
    error: runNotFound("nope"),
  },
  { what: "unknown run", method: "POST", path: "/api/runs/nope/stop", status: 404, error: runNotFound("nope") },
  {
    what: "run id not a name",
    method: "GET",
    path: "/api/runs/NOT_A_NAME",
    status: 404,
    error: runNotFound("NOT_A_NAME"),
  },
  {
    what: "bad percent-encoding in a run id",
    method: "GET",
    path: "/api/runs/%zz",
    status: 404,
    error: runNotFound("%zz"),
  },
  {
    what: "bad percent-encoding in a run id",
    method: "GET",
    path: "/api/runs/%zz/events",
    status: 404,
    error: runNotFound("%zz"),
  },
  { what: "NUL in a run id", method: "GET", path: "/api/runs/%00/tasks", status: 404, error: /^run ".*" not found$/ },
  {
    what: "8000-char run id",
    method: "GET",
    path: `/api/runs/${long(8000)}`,
    status: 404,
    error: /^run "a+" not found$/,
  },

  // A pipeline path parameter that is neither a name nor an id is a 400 stating the rule (contract.md section 4).
  { what: "uppercase key", method: "GET", path: "/api/pipelines/Upper", status: 400, error: badName("Upper") },
  { what: "64-char key", method: "GET", path: `/api/pipelines/${long(64)}`, status: 400, error: badName(long(64)) },
  {
    what: "bad percent-encoding",
    method: "GET",
    path: "/api/pipelines/%zz",
    status: 400,
    error: /is not valid: use lowercase/,
  },
  { what: "NUL", method: "GET", path: "/api/pipelines/%00", status: 400, error: /is not valid: use lowercase/ },
  { what: "raw ..", method: "DELETE", path: "/api/pipelines/..", status: 400, error: badName("..") },
  { what: "encoded slash", method: "POST", path: "/api/pipelines/a%2Fb/pause", status: 400, error: badName("a/b") },
  { what: "uppercase key", method: "GET", path: "/api/pipelines/Upper/secrets", status: 400, error: badName("Upper") },
  { what: "uppercase key", method: "POST", path: "/api/pipelines/Upper/trigger", status: 400, error: badName("Upper") },
  { what: "unicode key", method: "POST", path: "/api/pipelines/caf%C3%A9/run", status: 400, error: badName("café") },

  // Pagination and filters.
  ...["/api/pipelines", "/api/runs"].flatMap((list): Row[] =>
    [
      "page=0",
      "page=-1",
      "page=abc",
      "page=",
      "page=1.5",
      "page=1e3",
      "page=99999999999999999999",
      "per_page=1000",
      "per_page=0",
      "per_page=101",
      "page=1&page=2",
      "per_page=10&per_page=20",
      "page=%zz",
      `page=${"1".repeat(8000)}`,
    ].map((query) => ({
      what: "bad pagination",
      method: "GET",
      path: `${list}?${query}`,
      status: 400,
      error: badPage,
    })),
  ),
  {
    what: "unknown status",
    method: "GET",
    path: "/api/runs?status=done",
    status: 400,
    error: /\?status=done is not a run status; known: queued, running, success, failure, error, aborted/,
  },
  {
    what: "status in capitals",
    method: "GET",
    path: "/api/runs?status=SUCCESS",
    status: 400,
    error: /\?status=SUCCESS is not a run status/,
  },
  { what: "empty status", method: "GET", path: "/api/runs?status=", status: 400, error: /is not a run status/ },
  {
    what: "repeated status",
    method: "GET",
    path: "/api/runs?status=queued&status=running",
    status: 400,
    error: /\?status is given 2 times; give it once/,
  },
  {
    what: "repeated pipeline_id",
    method: "GET",
    path: "/api/runs?pipeline_id=a&pipeline_id=b",
    status: 400,
    error: /\?pipeline_id is given 2 times; give it once/,
  },
  {
    what: "8000-char status",
    method: "GET",
    path: `/api/runs?status=${long(8000)}`,
    status: 400,
    error: /is not a run status/,
  },

  // Requests larger than Node's 16 KiB header limit never reach a route; they still get a JSON answer.
  {
    what: "huge query string",
    method: "GET",
    path: `/api/runs?status=${long(20_000)}`,
    status: 431,
    error: /too large|header/i,
  },
  {
    what: "very long path",
    method: "GET",
    path: `/api/pipelines/${long(20_000)}`,
    status: 431,
    error: /too large|header/i,
  },

  // Last-Event-ID of a run's event stream.
  ...["abc", "-1", "1.5", "1e3", "12abc", "9".repeat(16), "0x10"].map(
    (id): Row => ({
      what: "bad Last-Event-ID",
      method: "GET",
      path: `${run}/events`,
      headers: { "Last-Event-ID": id },
      status: 400,
      error: new RegExp(`Last-Event-ID "${id.replace(/[.]/g, "\\.")}" is not an event id of this stream`),
    }),
  ),
]

type Raw = { status: number; type: string | undefined; text: string }

/** One request through node:http with the path as written; rejects when no answer comes within 15 s. */
function send(base: string, row: Row, runId: string): Promise<Raw> {
  const url = new URL(base)
  const body = row.json !== undefined ? JSON.stringify(row.json) : row.raw
  const headers: Record<string, string> = {
    ...(body === undefined ? {} : { "Content-Type": "application/json" }),
    ...(body === undefined || row.chunked === true ? {} : { "Content-Length": String(Buffer.byteLength(body)) }),
    ...row.headers,
  }
  return new Promise((resolve, reject) => {
    let answered = false
    const req = request(
      {
        host: url.hostname,
        port: url.port,
        method: row.method,
        path: row.path.replaceAll("{run}", runId),
        headers,
        agent: false,
        timeout: 15_000,
      },
      (res) => {
        answered = true
        let text = ""
        res.setEncoding("utf8")
        res.on("data", (chunk: string) => {
          text += chunk
        })
        res.on("end", () => resolve({ status: res.statusCode ?? 0, type: res.headers["content-type"], text }))
        res.on("error", reject)
      },
    )
    req.on("timeout", () =>
      req.destroy(new Error(`no answer within 15 s (the server hangs on ${row.method} ${row.path.slice(0, 100)})`)),
    )
    // The server may answer (413) and close before the whole body is written: the answer counts.
    req.on("error", (error) => {
      if (!answered) reject(error)
    })
    if (body !== undefined && row.chunked === true) {
      for (let at = 0; at < body.length; at += 64 * 1024) req.write(body.slice(at, at + 64 * 1024))
      req.end()
    } else req.end(body)
  })
}

const shorten = (text: string) => (text.length > 120 ? `${text.slice(0, 100)}...(${text.length} chars)` : text)

describe("malformed requests to runnel server", () => {
  let server: ServerProcess
  let base = ""
  let runId = ""
  let totals = { pipelines: 0, runs: 0 }
  const api = (method: string, path: string, body?: unknown): Promise<Answer> => call(base, method, path, body)
  const countAll = async () => ({
    pipelines: (await api("GET", "/api/pipelines")).body.total_items as number,
    runs: (await api("GET", "/api/runs")).body.total_items as number,
  })

  beforeAll(async () => {
    // gates enabled so that GET /api/runs/:id/gates reaches its run lookup.
    server = await servers.start(["--max-body-mb", "1", "--allowed-features", "*,gates"])
    base = server.url
    expect((await api("PUT", fixture, { content: script })).status).toBe(201)
    const trigger = await api("POST", `${fixture}/trigger`)
    expect(trigger.status).toBe(202)
    runId = trigger.body.run_id
    await eventually(
      () => api("GET", `/api/runs/${runId}`),
      (answer) => answer.body?.status === "success",
      "the fixture's run succeeds",
    )
    totals = await countAll()
    expect(totals).toEqual({ pipelines: 1, runs: 1 })
  })

  it.each(rows.map((row) => [`${row.method} ${shorten(row.path)}: ${row.what}`, row] as const))(
    "%s",
    async (_, row) => {
      const answer = await send(base, row, runId)
      const label = `${row.method} ${shorten(row.path)} (${row.what}) answered ${answer.status}: ${shorten(answer.text)}`
      expect(answer.status, label).not.toBe(500)
      expect(answer.status, label).toBe(row.status)
      expect(answer.type ?? "(no Content-Type)", label).toMatch(/^application\/json/)
      let body: unknown
      expect(() => {
        body = JSON.parse(answer.text)
      }, label).not.toThrow()
      expect(Object.keys(body as object), label).toEqual(["error"])
      const error = (body as { error: unknown }).error
      expect(typeof error, label).toBe("string")
      expect((error as string).trim(), label).not.toBe("")
      expect(error, label).toMatch(row.error)
    },
  )

  it("is still alive and serving afterwards", async () => {
    expect(server.child.exitCode).toBeNull()
    expect(server.child.signalCode).toBeNull()
    const health = await api("GET", "/health")
    expect(health).toMatchObject({ status: 200, body: { status: "ok" } })
    expect((await api("GET", fixture)).body).toMatchObject({
      name: "fixture",
      content: script,
      content_type: "ts",
      driver: "native",
      driver_config: {},
      rbac_expression: null,
      paused: false,
    })
  })

  it("created, triggered and changed nothing for a refused request", async () => {
    expect(await countAll()).toEqual(totals)
    const pipelines = await api("GET", "/api/pipelines?per_page=100")
    expect(pipelines.body.items.map((pipeline: { name: string }) => pipeline.name)).toEqual(["fixture"])
    const runs = await api("GET", "/api/runs?per_page=100")
    expect(runs.body.items.map((item: { id: string }) => item.id)).toEqual([runId])
  })

  it("logged no stack trace and no internal error", () => {
    // Raw lines on a terminal, JSON lines (a stack's newlines escaped) when piped, as here.
    const stderr = server.stderr()
    expect(stderr).not.toMatch(/(^|\\n)\s+at \S.*(:\d+:\d+\)?|\(native\))/m)
    expect(stderr).not.toMatch(/api\.error|internal error|Maximum call stack|RangeError|TypeError/)
  })
})
