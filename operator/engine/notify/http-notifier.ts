import { type NotifyBackend, show, urlField } from "./notify-backend.ts"

const methodPattern = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/

/**
 * Any HTTP endpoint: `url`, `method` (POST by default) and `headers`, with a
 * JSON body `{name, message, run_id, pipeline_name, status}`.
 */
export const httpBackend: NotifyBackend = {
  name: "http",
  check(config, where) {
    urlField(config, "url", where, "https://hooks.example.com/ci")
    const { method, headers } = config
    if (method !== undefined && (typeof method !== "string" || !methodPattern.test(method))) {
      throw new TypeError(`${where}: method must be an HTTP method such as "POST" or "PUT"; got ${show(method)}`)
    }
    if (headers === undefined) return
    if (headers === null || typeof headers !== "object" || Array.isArray(headers)) {
      throw new TypeError(`${where}: headers must be an object of header names to strings; got ${show(headers)}`)
    }
    for (const [name, value] of Object.entries(headers)) {
      if (!methodPattern.test(name)) throw new TypeError(`${where}: ${JSON.stringify(name)} is not a valid header name`)
      if (typeof value !== "string" || /[\r\n\0]/.test(value)) {
        throw new TypeError(`${where}: header ${name} must be a string without line breaks; got ${show(value)}`)
      }
    }
  },
  async send(config, notification, deliver) {
    const headers = Object.entries((config.headers ?? {}) as Record<string, string>)
    if (!headers.some(([name]) => name.toLowerCase() === "content-type"))
      headers.push(["content-type", "application/json"])
    await deliver({
      url: config.url as string,
      method: typeof config.method === "string" ? config.method.toUpperCase() : "POST",
      headers,
      body: JSON.stringify({
        name: notification.name,
        message: notification.message,
        run_id: notification.runId,
        pipeline_name: notification.pipelineName,
        status: notification.status,
      }),
    })
  },
}
