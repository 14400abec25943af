import { createServer } from "node:net"
import { requestFrom } from "./from-address.ts"

/**
 * What a browser does over plain HTTP, for tests that do not need a real
 * one: a cookie jar for 127.0.0.1 (cookies ignore ports, as browsers do),
 * redirects followed by hand so each hop can be checked, and the Origin a
 * browser sends with a form POST. With `localAddress` (one of 127.0.0.0/8)
 * the browser is a client at that address, so that tests of the limits per
 * address do not share one.
 */
export class BrowserSession {
  readonly cookies = new Map<string, string>()
  /** Every Set-Cookie header received, newest last. */
  readonly setCookies: string[] = []
  readonly #localAddress: string | undefined

  constructor(localAddress?: string) {
    this.#localAddress = localAddress
  }

  async request(url: string, init: { method?: string; form?: Record<string, string>; origin?: string } = {}) {
    const headers: Record<string, string> = {}
    if (this.cookies.size > 0) headers.Cookie = [...this.cookies].map(([name, value]) => `${name}=${value}`).join("; ")
    if (init.form !== undefined) headers["Content-Type"] = "application/x-www-form-urlencoded"
    if (init.origin !== undefined) headers.Origin = init.origin
    const body = init.form === undefined ? undefined : new URLSearchParams(init.form).toString()
    const method = init.method ?? "GET"
    const response =
      this.#localAddress === undefined
        ? await fetch(url, { method, headers, redirect: "manual", ...(body === undefined ? {} : { body }) })
        : asResponse(await requestFrom(this.#localAddress, url, { method, headers, body }))
    for (const cookie of response.headers.getSetCookie()) {
      this.setCookies.push(cookie)
      const [pair = "", ...attributes] = cookie.split(";")
      const name = pair.slice(0, pair.indexOf("="))
      const value = pair.slice(pair.indexOf("=") + 1)
      const expired = attributes.some((a) => /^\s*expires=Thu, 01 Jan 1970/i.test(a)) || value === ""
      if (expired) this.cookies.delete(name)
      else this.cookies.set(name, value)
    }
    return response
  }

  /** GETs `url` and follows its redirects; the final answer and every URL visited. */
  async follow(url: string): Promise<{ response: Response; visited: string[] }> {
    const visited = [url]
    let response = await this.request(url)
    while (response.status >= 300 && response.status < 400) {
      const next = new URL(response.headers.get("location") ?? "", visited.at(-1)).toString()
      await response.body?.cancel()
      visited.push(next)
      if (visited.length > 10) throw new Error(`too many redirects: ${visited.join(" -> ")}`)
      response = await this.request(next)
    }
    return { response, visited }
  }
}

/** A port free now on 127.0.0.1: for a server whose public URL must be known before it starts. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number }
      server.close(() => resolve(port))
    })
  })
}

/** node:http's answer as fetch's Response, so that a session answers alike from any address. */
function asResponse(answer: Awaited<ReturnType<typeof requestFrom>>): Response {
  const headers = new Headers()
  for (const [name, value] of Object.entries(answer.headers)) {
    for (const one of [value ?? []].flat()) headers.append(name, one)
  }
  const bodyless = answer.status === 204 || answer.status === 304
  return new Response(bodyless ? null : answer.text, { status: answer.status, headers })
}
