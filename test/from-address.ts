import { type IncomingHttpHeaders, request } from "node:http"

export type Answer = { status: number; headers: IncomingHttpHeaders; text: string }

/**
 * An HTTP request sent from `localAddress` (any of 127.0.0.0/8 on Linux), so
 * that tests can be several clients at once: the server sees each as its own
 * TCP peer address. fetch cannot choose its source address without undici's
 * own Agent, which is not a dependency.
 */
export function requestFrom(
  localAddress: string,
  url: string,
  init: { method?: string; headers?: Record<string, string>; form?: Record<string, string>; body?: string } = {},
): Promise<Answer> {
  const body = init.form === undefined ? init.body : new URLSearchParams(init.form).toString()
  const headers = {
    ...(body === undefined ? {} : { "Content-Type": "application/x-www-form-urlencoded" }),
    ...init.headers,
  }
  return new Promise((resolve, reject) => {
    const sent = request(url, { method: init.method ?? "GET", headers, localAddress }, (response) => {
      const chunks: Buffer[] = []
      response.on("data", (chunk: Buffer) => chunks.push(chunk))
      response.on("error", reject)
      response.on("end", () =>
        resolve({
          status: response.statusCode ?? 0,
          headers: response.headers,
          text: Buffer.concat(chunks).toString("utf8"),
        }),
      )
    })
    sent.on("error", reject)
    sent.end(body)
  })
}
