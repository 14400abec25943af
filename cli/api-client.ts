import type { IncomingHttpHeaders, IncomingMessage } from "node:http"
import type { ClientSettings } from "../lib/config/client.ts"
import { errorMessage, SystemError } from "../lib/core/errors.ts"

/** The server answered with an error status: its `{"error"}` message is the one line the CLI prints (exit 1). */
export class ServerRefused extends Error {
  readonly status: number
  constructor(status: number, message: string) {
    super(message)
    this.name = "ServerRefused"
    this.status = status
  }
}

export type Answer = { readonly status: number; readonly body: unknown }

export type ApiClient = {
  /** The URL without credentials, for messages. */
  readonly url: string
  call(method: string, path: string, body?: unknown): Promise<Answer>
  /**
   * POSTs a form to an OAuth endpoint (`runnel login`'s device grant): the JSON answer of a 200,
   * or of a 400, which is how OAuth endpoints say `authorization_pending` and the like.
   */
  oauth(path: string, fields: Readonly<Record<string, string>>): Promise<Answer>
  /** The events of a `text/event-stream` answer, each `data:` line parsed as JSON. */
  events(
    method: string,
    path: string,
    body: unknown,
    signal: AbortSignal,
    onOpen?: (headers: IncomingHttpHeaders) => void,
  ): AsyncGenerator<unknown>
}

/**
 * A JSON client of the REST API at the settings' URL, on node:http rather
 * than fetch: a client command makes a request or two, and loading undici for
 * fetch's first one costs about 40 ms, more than the rest of the command's work.
 */
export function apiClient({ url, authorization }: ClientSettings): ApiClient {
  const headers: Record<string, string> = { Accept: "application/json" }
  if (authorization !== undefined) headers.Authorization = authorization

  /**
   * Sends one request (a JSON body, or `payload` as it is); a status `accepted` does not take
   * becomes a ServerRefused with the server's message.
   */
  const send = async (
    method: string,
    path: string,
    body: unknown,
    signal?: AbortSignal,
    {
      payload = body === undefined ? undefined : { text: JSON.stringify(body), type: "application/json" },
      accepted = isSuccess,
    } = {} as {
      payload?: { text: string; type: string } | undefined
      accepted?: (status: number) => boolean
    },
  ): Promise<IncomingMessage> => {
    const target = new URL(`${url}${path}`)
    // getBuiltinModule, not import(): the ES module view of node:http reads its lazy exports, and one of them loads undici.
    const request =
      target.protocol === "https:"
        ? process.getBuiltinModule("node:https").request
        : process.getBuiltinModule("node:http").request
    let response: IncomingMessage
    try {
      response = await new Promise<IncomingMessage>((resolve, reject) => {
        const sent = request(target, {
          method,
          headers: payload === undefined ? headers : { ...headers, "Content-Type": payload.type },
          ...(signal === undefined ? {} : { signal }),
        })
        sent.on("response", resolve).on("error", reject).end(payload?.text)
      })
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code
      throw new SystemError(
        `cannot reach the runnel server at ${url}: ${code ?? errorMessage(error)}; start it with \`runnel server\` or point --server-url (CI_SERVER_URL) at it`,
      )
    }
    const status = response.statusCode ?? 0
    if (accepted(status)) return response
    const text = await readText(response)
    let message: unknown
    try {
      const parsed = JSON.parse(text) as { error?: unknown; error_description?: unknown } | null
      // /auth's OAuth endpoints (RFC 6749 section 5.2) put a code in `error` and the sentence for people beside it.
      message = typeof parsed?.error_description === "string" ? parsed.error_description : parsed?.error
    } catch {
      message = undefined
    }
    if (status === 401) {
      // contract.md section 3: the server, how to log in, and the variable that carries a token.
      const reason = typeof message === "string" ? ` (${message})` : ""
      throw new ServerRefused(
        401,
        `${url} needs authentication${reason}: log in with \`runnel login -s ${url}\` or set CI_AUTH_TOKEN`,
      )
    }
    throw new ServerRefused(
      status,
      typeof message === "string" ? message : `${url} answered ${method} ${path} with HTTP ${status}`,
    )
  }

  const answer = async (response: IncomingMessage): Promise<Answer> => {
    const text = await readText(response)
    let parsed: unknown
    try {
      parsed = text === "" ? undefined : JSON.parse(text)
    } catch {
      parsed = text
    }
    return { status: response.statusCode ?? 0, body: parsed }
  }

  return {
    url,
    call: async (method, path, body) => answer(await send(method, path, body)),
    oauth: async (path, fields) =>
      answer(
        await send("POST", path, undefined, undefined, {
          payload: { text: new URLSearchParams(fields).toString(), type: "application/x-www-form-urlencoded" },
          accepted: (status) => isSuccess(status) || status === 400,
        }),
      ),
    async *events(method, path, body, signal, onOpen) {
      const response = await send(method, path, body, signal)
      onOpen?.(response.headers)
      let buffer = ""
      try {
        for await (const text of response.setEncoding("utf8") as AsyncIterable<string>) {
          buffer += text
          for (let end = buffer.indexOf("\n\n"); end !== -1; end = buffer.indexOf("\n\n")) {
            const frame = buffer.slice(0, end)
            buffer = buffer.slice(end + 2)
            const data = frame
              .split("\n")
              .filter((line) => line.startsWith("data:"))
              .map((line) => line.slice(5).trimStart())
              .join("\n")
            if (data !== "") yield JSON.parse(data)
          }
        }
      } catch (error) {
        if (signal.aborted) return
        throw new SystemError(`the event stream from ${url} broke off: ${errorMessage(error)}`)
      }
    },
  }
}

const isSuccess = (status: number) => status >= 200 && status < 300

async function readText(response: IncomingMessage): Promise<string> {
  let text = ""
  for await (const chunk of response.setEncoding("utf8") as AsyncIterable<string>) text += chunk
  return text
}
