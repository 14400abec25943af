import { execFileSync, spawn } from "node:child_process"
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { join } from "node:path"

/**
 * A git smart-HTTP server on loopback: Debian's `git http-backend` run as a
 * CGI program (git-http-backend(1)) for each request, behind Basic
 * authentication, serving the bare repositories under `root`. Pushes are on
 * (`http.receivepack`), as an authenticated server would allow them.
 */
export async function gitHttpServer(root: string, credentials: { username: string; password: string }) {
  const backend = join(execFileSync("git", ["--exec-path"], { encoding: "utf8" }).trim(), "git-http-backend")
  const expected = `Basic ${Buffer.from(`${credentials.username}:${credentials.password}`).toString("base64")}`
  const requests: string[] = []
  const server = createServer((request, response) => {
    const url = new URL(request.url ?? "/", "http://git.test")
    requests.push(`${request.method} ${url.pathname}${url.search}`)
    if (request.headers.authorization !== expected) {
      response.writeHead(401, { "www-authenticate": 'Basic realm="git"' }).end("authentication required\n")
      return
    }
    const cgi = spawn(backend, [], {
      env: {
        GIT_PROJECT_ROOT: root,
        GIT_HTTP_EXPORT_ALL: "1",
        REQUEST_METHOD: request.method ?? "GET",
        PATH_INFO: decodeURIComponent(url.pathname),
        QUERY_STRING: url.search.slice(1),
        CONTENT_TYPE: request.headers["content-type"] ?? "",
        REMOTE_USER: credentials.username,
        REMOTE_ADDR: "127.0.0.1",
        ...(request.headers["content-encoding"] === undefined
          ? {}
          : { HTTP_CONTENT_ENCODING: String(request.headers["content-encoding"]) }),
        ...(request.headers["git-protocol"] === undefined
          ? {}
          : { GIT_PROTOCOL: String(request.headers["git-protocol"]) }),
      },
    })
    request.pipe(cgi.stdin)
    // The CGI answer: header lines, a blank line, the body; `Status:` sets the code.
    let head = Buffer.alloc(0)
    let started = false
    cgi.stdout.on("data", (chunk: Buffer) => {
      if (started) {
        response.write(chunk)
        return
      }
      head = Buffer.concat([head, chunk])
      const end = head.indexOf("\r\n\r\n")
      if (end < 0) return
      started = true
      let status = 200
      const headers: Record<string, string> = {}
      for (const line of head.subarray(0, end).toString("latin1").split("\r\n")) {
        const colon = line.indexOf(":")
        const name = line.slice(0, colon).trim()
        const value = line.slice(colon + 1).trim()
        if (name.toLowerCase() === "status") status = Number.parseInt(value, 10)
        else headers[name] = value
      }
      response.writeHead(status, headers)
      response.write(head.subarray(end + 4))
    })
    cgi.on("close", () => {
      if (!started) response.writeHead(500)
      response.end()
    })
    cgi.stderr.resume()
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}

/** Runs git in `dir` with a fixed identity and date, answering its trimmed stdout. */
export function gitIn(dir: string, ...args: string[]): string {
  return execFileSync("git", args, {
    cwd: dir,
    encoding: "utf8",
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      HOME: dir,
      GIT_AUTHOR_NAME: "Ada Author",
      GIT_AUTHOR_EMAIL: "ada@example.com",
      GIT_COMMITTER_NAME: "Cy Committer",
      GIT_COMMITTER_EMAIL: "cy@example.com",
      GIT_AUTHOR_DATE: "2025-01-31T12:00:00Z",
      GIT_COMMITTER_DATE: "2025-01-31T12:00:00Z",
    },
  }).trim()
}
