import { afterAll, describe, expect, it } from "vitest"
import { call, type Event, readEvents, serverProcesses } from "./server-process.ts"

// A task prints a pipeline secret encoded as tools print tokens (base64 as in docker's `auth`, hex from
// `od`, percent-encoded in a URL, escaped in a JSON string), each cut in two writes with a pause between,
// through a real `runnel server`: none of the encodings reaches the SSE stream, the stored output, or
// what runtime.run gives the pipeline.
const servers = serverProcesses("runnel-encoded-secrets-test-")
afterAll(() => servers.cleanUp())

// A quote (JSON escapes it), a space, "@", "/", ":" and "+" (a URL encodes them).
const token = 'tok"en p@ss/w:rd+8f3a'

/** Prints $1 in two writes: its first 7 characters, a pause, the rest and a newline. */
const shell = String.raw`
split() { printf '%s' "$1" | cut -c1-7 | tr -d '\n'; sleep 0.3; printf '%s\n' "$1" | cut -c8-; }
split "auth=$(printf '%s' "bot:$TOKEN" | base64 | tr -d '\n')"
split "b64=$(printf '%s' "$TOKEN" | base64 | tr -d '\n')"
split "hex=$(printf '%s' "$TOKEN" | od -An -v -tx1 | tr -d ' \n')"
split "url=https://registry.test/v2/?token=$(printf '%s' "$TOKEN" | sed -e 's/%/%25/g' -e 's/"/%22/g' -e 's/ /%20/g' -e 's/@/%40/g' -e 's|/|%2F|g' -e 's/:/%3A/g' -e 's/+/%2B/g')&x=1"
split "json={\"token\":\"$(printf '%s' "$TOKEN" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g')\"}"
`

// runtime.run's result, printed reversed: a reversed secret is no form the redactor knows, so what
// shows here is what the result itself held.
const pipeline = `export const pipeline = async () => {
  const r = await runtime.run({ name: "encode", image: "busybox", command: { path: "sh", args: ["-c", ${JSON.stringify(shell)}] }, env: { TOKEN: "secret:TOKEN" } })
  console.log([...r.stdout].reverse().join(""))
}
`

const b64 = (text: string) => Buffer.from(text).toString("base64")
/** How the task prints the token, each form whole. */
const printed = {
  auth: b64(`bot:${token}`),
  b64: b64(token),
  hex: Buffer.from(token).toString("hex"),
  url: encodeURIComponent(token),
  json: JSON.stringify(token).slice(1, -1),
}

/** Fails naming the form when `text` holds the token or 8 or more characters in a row of any printed form's secret part. */
function expectNoEncodedToken(text: string, where: string) {
  expect(text, where).not.toContain(token)
  for (const [name, form] of Object.entries(printed)) {
    // base64 keeps a character or two at each end that mix in the bytes around the token.
    const inner = name === "auth" ? form.slice(6, -3) : name === "b64" ? form.slice(0, -3) : form
    for (let at = 0; at + 8 <= inner.length; at++)
      expect(text, `${where}: ${name}`).not.toContain(inner.slice(at, at + 8))
  }
}

describe("encoded secrets in a run's output", () => {
  it("are redacted in the SSE stream, the stored output and runtime.run's result", async () => {
    expect(encodeURIComponent(token)).toBe("tok%22en%20p%40ss%2Fw%3Ard%2B8f3a")
    const server = await servers.start()
    const put = await call(server.url, "PUT", "/api/pipelines/encodes", {
      content: pipeline,
      secrets: { TOKEN: token },
    })
    expect(put.status).toBe(201)

    const response = await fetch(`${server.url}/api/pipelines/encodes/run`, { method: "POST" })
    const events: Event[] = await readEvents(response)
    const exit = events.at(-1)?.data
    expect(exit).toMatchObject({ event: "exit", code: 0 })
    const sse = events
      .filter((event) => event.data.stream !== undefined)
      .map((event) => event.data.data)
      .join("")
    // The task wrote each line in two pieces, and the stream carried them as they came.
    expect(events.filter((event) => event.data.stream === "stdout").length).toBeGreaterThan(5)
    const stored = (await call(server.url, "GET", `/api/runs/${exit.run_id}/tasks`)).body
    const taskOut = stored.find((task: { path: string }) => task.path === "tasks/1/encode").stdout
    const consoleOut = stored.find((task: { path: string }) => task.path === "pipeline/console").stdout
    const result = [...consoleOut].reverse().join("")

    for (const [where, text] of [
      ["SSE", sse],
      ["stored task output", taskOut],
      ["runtime.run's result", result],
    ] as const) {
      expectNoEncodedToken(text, where)
      for (const name of Object.keys(printed))
        expect(text, where).toMatch(new RegExp(`${name}=\\S*\\*\\*\\*REDACTED\\*\\*\\*`))
    }
    // What users see: each line masked where the token was, the text around it kept.
    expect(taskOut).toContain("url=https://registry.test/v2/?token=***REDACTED***&x=1\n")
    expect(taskOut).toContain('json={"token":"***REDACTED***"}\n')
    expect(taskOut).toContain("hex=***REDACTED***\n")
    expect(server.stdout() + server.stderr()).not.toContain(token)
  }, 60_000)
})
