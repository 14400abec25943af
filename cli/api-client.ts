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
  /** The events of a `text/event-stream` answer, each `data:` line parsed as JSON. */
  events(
    method: string,
    path: string,
    body: unknown,
    signal: AbortSignal,
    onOpen?: (headers: Headers) => void,
  ): AsyncGenerator<unknown>
}

/** A JSON client of the REST API at the settings' URL. */
export function apiClient({ url, authorization }: ClientSettings): ApiClient {
  const headers: Record<string, string> = { Accept: "application/json" }
  if (authorization !== undefined) headers.Authorization = authorization

  /** Sends one request; a refusal becomes a ServerRefused with the server's message. */
  const send = async (method: string, path: string, body: unknown, signal?: AbortSignal): Promise<Response> => {
    let response: Response
    try {
      response = await fetch(`${url}${path}`, {
        method,
        headers: body === undefined ? headers : { ...headers, "Content-Type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
        ...(signal === undefined ? {} : { signal }),
      })
    } catch (error) {
      const cause = (error as { cause?: { code?: string; message?: string } }).cause
      throw new SystemError(
        `cannot reach the runnel server at ${url}: ${cause?.code ?? cause?.message ?? errorMessage(error)}; start it with \`runnel server\` or point --server-url (CI_SERVER_URL) at it`,
      )
    }
    if (response.ok) return response
    if (response.status === 401) {
      throw new ServerRefused(
        401,
        `${url} needs authentication: log in with \`runnel login -s ${url}\` or set CI_AUTH_TOKEN`,
      )
    }
    const text = await response.text()
    let message: unknown
    try {
      message = (JSON.parse(text) as { error?: unknown } | null)?.error
    } catch {
      message = undefined
    }
    throw new ServerRefused(
      response.status,
      typeof message === "string" ? message : `${url} answered ${method} ${path} with HTTP ${response.status}`,
    )
  }

  return {
    url,
    async call(method, path, body) {
      const response = await send(method, path, body)
      const text = await response.text()
      let parsed: unknown
      try {
        parsed = text === "" ? undefined : JSON.parse(text)
      } catch {
        parsed = text
      }
      return { status: response.status, body: parsed }
    },
    async *events(method, path, body, signal, onOpen) {
      const response = await send(method, path, body, signal)
      onOpen?.(response.headers)
      if (response.body === null) return
      let buffer = ""
      try {
        for await (const text of response.body.pipeThrough(new TextDecoderStream())) {
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
