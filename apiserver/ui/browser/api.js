// The UI's only way to the server: the REST API under /api and MCP's search, with the browser's session
// (credentials "same-origin"), so the server decides what this user sees, as for any other client.

/** The server refused: its `{"error"}` message, to show where the user acted. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message)
    this.status = status
  }
}

/** Where a 401 sends the user: the login page, back here afterwards. */
export function loginUrl() {
  return `/auth/login?next=${encodeURIComponent(location.pathname + location.search + location.hash)}`
}

/** A JSON request; answers the parsed body (undefined for 204), throws an ApiError with the server's message. */
export async function api(method, path, body) {
  const response = await fetch(path, {
    method,
    credentials: "same-origin",
    headers:
      body === undefined
        ? { Accept: "application/json" }
        : { Accept: "application/json", "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  if (response.status === 401) {
    location.assign(loginUrl())
    throw new ApiError(401, "you need to log in")
  }
  const text = await response.text()
  let parsed
  try {
    parsed = text === "" ? undefined : JSON.parse(text)
  } catch {
    parsed = undefined
  }
  if (!response.ok) {
    throw new ApiError(response.status, parsed?.error ?? `${method} ${path} answered HTTP ${response.status}`)
  }
  return parsed
}

export const get = (path) => api("GET", path)

/** Every item of a paginated list, 100 a request: the first page says how many more, asked for at once. */
export async function getAll(path) {
  const join = path.includes("?") ? "&" : "?"
  const page = (n) => get(`${path}${join}page=${n}&per_page=100`)
  const first = await page(1)
  const rest = await Promise.all(Array.from({ length: Math.max(0, first.total_pages - 1) }, (_, n) => page(n + 2)))
  return [first, ...rest].flatMap((body) => body.items)
}

/** Calls an MCP tool (POST /mcp, stateless JSON-RPC): the search the assistants use is the UI's search. */
export async function mcpTool(name, args) {
  const body = await api("POST", "/mcp", {
    jsonrpc: "2.0",
    id: 1,
    method: "tools/call",
    params: { name, arguments: args },
  })
  if (body?.error !== undefined) throw new ApiError(400, body.error.message)
  const text = body?.result?.content?.[0]?.text ?? "{}"
  const result = JSON.parse(text)
  if (body.result.isError) throw new ApiError(400, result.error ?? text)
  return result
}

export const enc = encodeURIComponent
