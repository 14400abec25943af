import { execFileSync } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { createServer as createHttpsServer } from "node:https"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { gzipSync } from "node:zlib"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { staticSecrets } from "../../lib/secrets/secret-resolver.ts"
import { nativeDriverFactory } from "../drivers/native/native-driver.ts"
import { isMetadataAddress } from "./outbound.ts"
import { scriptRunner, testServer } from "./script-run.fixture.ts"

// fetch() from a real script run to real HTTP servers on loopback.
const dir = mkdtempSync(join(tmpdir(), "runnel-fetch-test-"))
let runner: Awaited<ReturnType<typeof scriptRunner>>
let server: Awaited<ReturnType<typeof testServer>>
beforeAll(async () => {
  runner = await scriptRunner(
    nativeDriverFactory({ workRoot: join(dir, "work"), path: "/usr/bin:/bin" }).create({}),
    "native",
  )
  server = await testServer((request, response) => {
    const url = new URL(request.url, "http://x")
    if (url.pathname === "/build") {
      response.writeHead(200, { "content-type": "application/json", "x-build": "42", "set-cookie": ["a=1", "b=2"] })
      response.end(
        JSON.stringify({ version: "1.4.0", seen: { method: request.method, token: request.headers["x-token"] } }),
      )
    } else if (url.pathname === "/echo") {
      response.writeHead(201, "Made", { "content-type": request.headers["content-type"] ?? "none" })
      response.end(request.body)
    } else if (url.pathname === "/gzip") {
      response.writeHead(200, { "content-encoding": "gzip" })
      response.end(gzipSync("unpacked text"))
    } else if (url.pathname === "/redirect") {
      response.writeHead(302, { location: url.searchParams.get("to") ?? "/build" }).end()
    } else if (url.pathname === "/slow") {
      // Never answers: the caller's timeout must end it.
    } else if (url.pathname === "/big") {
      response.writeHead(200, { "content-type": "application/octet-stream" })
      response.end(Buffer.alloc(4096, "x"))
    } else if (url.pathname === "/huge") {
      // Declares 2 GiB and keeps sending: the cap refuses it without reading it all.
      response.writeHead(200, { "content-length": String(2 * 1024 * 1024 * 1024) })
      const chunk = Buffer.alloc(64 * 1024)
      const pump = () => {
        while (response.write(chunk)) if (response.destroyed) return
        response.once("drain", pump)
      }
      response.on("error", () => {})
      pump()
    } else {
      response.writeHead(404).end("not here")
    }
  })
})
afterAll(async () => {
  await server.close()
  await runner.close()
  rmSync(dir, { recursive: true, force: true })
})

/** Runs `body` inside the pipeline, printing what a caught error says, and returns the console's stdout. */
async function console_(body: string, options: Parameters<typeof runner.run>[1] = {}) {
  const { output, result } = await runner.run(
    `export const pipeline = async () => {
      const base = ${JSON.stringify(server.url)}
      try { ${body} } catch (error) { console.log("rejected: " + error.message) }
    }`,
    options,
  )
  expect(result.status).toBe("success")
  return output("pipeline/console")
}

describe("fetch()", () => {
  it("reaches a local server and reads JSON, headers and status, logging one redacted line per request", async () => {
    const printed = await console_(
      `const headers = new Headers({ "X-Token": "secret-token-value" })
      headers.append("Accept", "application/json")
      const response = await fetch(base + "/build?token=secret-token-value", { headers })
      const body = await response.json()
      console.log(response.status, response.ok, response.statusText, response.url === base + "/build?token=secret-token-value")
      console.log(body.version, body.seen.method, body.seen.token === "secret-token-value")
      console.log(response.headers.get("X-Build"), response.headers.has("content-type"), response.headers.get("set-cookie"))
      console.log(JSON.stringify([...response.headers].filter(([name]) => name !== "date" && name !== "connection" && name !== "keep-alive" && name !== "transfer-encoding")))
      console.log(response.bodyUsed)
      await response.text().catch((error) => console.log(error.name, error.message))`,
      { secrets: staticSecrets({ TOKEN: "secret-token-value" }) },
    )
    const lines = printed.split("\n")
    expect(lines[0]).toMatch(
      /^fetch GET http:\/\/127\.0\.0\.1:\d+\/build\?token=\*\*\*REDACTED\*\*\* -> 200 in \d+ ms$/,
    )
    expect(lines.slice(1)).toEqual([
      "200 true OK true",
      "1.4.0 GET true",
      "42 true a=1, b=2",
      JSON.stringify([
        ["content-type", "application/json"],
        ["set-cookie", "a=1"],
        ["set-cookie", "b=2"],
        ["x-build", "42"],
      ]),
      "true",
      "TypeError Response: the body has already been read",
      "",
    ])
  })

  it("sends nothing of the host: no proxy from its environment, no cookies, only the script's headers", async () => {
    const saved = { HTTP_PROXY: process.env.HTTP_PROXY, NODE_USE_ENV_PROXY: process.env.NODE_USE_ENV_PROXY }
    // A proxy the host would use if fetch() took it from the environment; nothing listens there.
    process.env.HTTP_PROXY = "http://user:proxy-password@127.0.0.1:1"
    process.env.NODE_USE_ENV_PROXY = "1"
    const before = server.received.length
    try {
      const printed = await console_(
        `console.log((await fetch(base + "/build", { headers: { "x-token": "t" } })).status)`,
      )
      expect(printed).toContain("\n200\n")
    } finally {
      for (const [name, value] of Object.entries(saved)) {
        if (value === undefined) delete process.env[name]
        else process.env[name] = value
      }
    }
    const [request] = server.received.slice(before)
    expect(Object.keys(request?.headers ?? {}).sort()).toEqual(["accept-encoding", "connection", "host", "x-token"])
  })

  it("sends a method and a body, string or bytes, and undoes gzip", async () => {
    const printed = await console_(
      `const text = await fetch(base + "/echo", { method: "post", body: "héllo" })
      console.log(text.status, text.statusText, text.headers.get("content-type"), await text.text())
      const bytes = await fetch(base + "/echo", { method: "PUT", body: new Uint8Array([104, 105]), headers: [["content-type", "application/octet-stream"]] })
      console.log(new Uint8Array(await bytes.arrayBuffer()).join(","))
      console.log(await (await fetch(base + "/gzip")).text())`,
    )
    expect(printed).toContain("201 Made text/plain;charset=UTF-8 héllo\n")
    expect(printed).toContain("104,105\n")
    expect(printed).toContain("unpacked text\n")
  })

  it("follows redirects and tells where the answer came from", async () => {
    const printed = await console_(
      `const response = await fetch(base + "/redirect?to=/build")
      console.log(response.status, response.redirected, response.url.endsWith("/build"))`,
    )
    expect(printed).toContain("200 true true\n")
  })

  it("rejects at the timeout, naming it, and at the size limit, naming the flag", async () => {
    const printed = await console_(
      `try { await fetch(base + "/slow", { timeout: "300ms" }) } catch (error) { console.log(error.message) }
      try { await fetch(base + "/big") } catch (error) { console.log(error.message) }`,
      { network: { fetchMaxResponseBytes: 1024 } },
    )
    expect(printed).toContain(`fetch GET ${server.url}/slow: no complete answer within 300ms, the timeout\n`)
    expect(printed).toContain(
      `fetch GET ${server.url}/big: the response is larger than 1 KiB, the limit (--fetch-max-response-mb)\n`,
    )
  })

  it("refuses a 2 GiB response under the default limit without reading it", async () => {
    const printed = await console_(`await fetch(base + "/huge")`)
    expect(printed).toContain(
      `rejected: fetch GET ${server.url}/huge: the response is larger than 10 MiB, the limit (--fetch-max-response-mb)\n`,
    )
  })

  it("refuses file:, ftp: and malformed URLs with a message the script can catch", async () => {
    const printed = await console_(
      `for (const url of ["file:///etc/passwd", "ftp://example.com/x", "not a url", "http://"]) {
        try { await fetch(url) } catch (error) { console.log(error.message) }
      }`,
    )
    expect(printed.split("\n").filter((line) => !line.includes(" -> failed in "))).toEqual([
      "fetch GET file:///etc/passwd: requested file: URL file:///etc/passwd: only http: and https: URLs are allowed",
      "fetch GET ftp://example.com/x: requested ftp: URL ftp://example.com/x: only http: and https: URLs are allowed",
      'fetch GET not a url: "not a url" is not a valid URL; write it in full, such as https://example.com/path',
      'fetch GET http://: "http://" is not a valid URL; write it in full, such as https://example.com/path',
      "",
    ])
  })

  it("refuses cloud metadata addresses: literal, behind a redirect, and after resolving a name", async () => {
    // No DNS server answers here: a stand-in resolver plays its part, as dns.lookup would answer.
    const resolve = async (name: string) =>
      name === "metadata.internal.test"
        ? [{ address: "169.254.169.254", family: 4 }]
        : name === "app.internal.test"
          ? [{ address: "127.0.0.1", family: 4 }]
          : []
    const port = new URL(server.url).port
    const printed = await console_(
      `for (const url of [
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:169.254.169.254]/",
        base + "/redirect?to=" + encodeURIComponent("http://169.254.169.254/latest/meta-data/"),
        "http://metadata.internal.test:${port}/build",
        base + "/redirect?to=" + encodeURIComponent("http://metadata.internal.test:${port}/build"),
      ]) {
        try { await fetch(url); console.log("reached " + url) } catch (error) { console.log(error.message.replace(/^fetch GET \\S+: /, "")) }
      }
      console.log((await fetch("http://app.internal.test:${port}/build")).status)`,
      { network: { resolve } },
    )
    const refused = printed.split("\n").filter((line) => !line.startsWith("fetch GET"))
    expect(refused).toEqual([
      "169.254.169.254 is a cloud metadata address, which pipelines may not reach; the server allows it with --allow-metadata-addresses",
      "::ffff:a9fe:a9fe is a cloud metadata address, which pipelines may not reach; the server allows it with --allow-metadata-addresses",
      "169.254.169.254 is a cloud metadata address, which pipelines may not reach; the server allows it with --allow-metadata-addresses",
      "metadata.internal.test (it resolves to 169.254.169.254) is a cloud metadata address, which pipelines may not reach; the server allows it with --allow-metadata-addresses",
      "metadata.internal.test (it resolves to 169.254.169.254) is a cloud metadata address, which pipelines may not reach; the server allows it with --allow-metadata-addresses",
      "200",
      "",
    ])
    // Allowed, the request goes out to that address (nothing listens there on this machine, or it answers).
    const allowed = await console_(`await fetch("http://metadata.internal.test:${port}/build", { timeout: "2s" })`, {
      network: { resolve, allowMetadataAddresses: true },
    })
    expect(allowed).toMatch(/^fetch GET http:\/\/metadata\.internal\.test:\d+\/build -> /)
    expect(allowed).not.toContain("cloud metadata address")
  })

  it("checks the server's certificate over https: a self-signed one is refused", async () => {
    const key = join(dir, "key.pem")
    const cert = join(dir, "cert.pem")
    execFileSync(
      "openssl",
      [
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        key,
        "-out",
        cert,
        "-days",
        "1",
        "-subj",
        "/CN=127.0.0.1",
        "-addext",
        "subjectAltName=IP:127.0.0.1",
      ],
      { stdio: "ignore" },
    )
    const tls = createHttpsServer({ key: readFileSync(key), cert: readFileSync(cert) }, (_, response) =>
      response.end("secure"),
    )
    await new Promise<void>((resolve) => tls.listen(0, "127.0.0.1", resolve))
    const { port } = tls.address() as AddressInfo
    try {
      const printed = await console_(`await fetch("https://127.0.0.1:${port}/")`)
      expect(printed).toContain(
        `rejected: fetch GET https://127.0.0.1:${port}/: DEPTH_ZERO_SELF_SIGNED_CERT: self-signed certificate`,
      )
    } finally {
      tls.closeAllConnections()
      await new Promise((resolve) => tls.close(resolve))
    }
  })

  it("with the fetch feature off, rejects with exactly the feature message and sends nothing", async () => {
    const before = server.received.length
    const printed = await console_(`await fetch(base + "/build")`, { network: { fetch: false } })
    expect(printed).toBe("rejected: fetch feature is not enabled\n")
    expect(server.received.length).toBe(before)
  })

  it("checks its arguments where the script can catch them", async () => {
    const printed = await console_(
      `for (const call of [
        () => fetch(base + "/echo", { method: "GET", body: "x" }),
        () => fetch(base + "/echo", { method: "POST", body: { a: 1 } }),
        () => fetch(base + "/echo", { headers: { "bad header": "x" } }),
        () => fetch(base + "/echo", { timeout: "soon" }),
        () => fetch(42),
      ]) {
        try { await call() } catch (error) { console.log(error.name + ": " + error.message) }
      }`,
    )
    expect(printed.split("\n")).toEqual([
      "TypeError: fetch: a GET request cannot have a body",
      'TypeError: fetch: body must be a string, an ArrayBuffer or a typed array; send an object as JSON.stringify(value), got {"a":1}',
      'TypeError: Headers.append: "bad header" is not a valid header name',
      'RangeError: fetch: timeout must be a duration such as "30s", "1h" or "1m30s", or a number of seconds, got "soon"',
      "TypeError: fetch: the first argument must be a URL string, got 42",
      "",
    ])
  })
})

describe("isMetadataAddress", () => {
  it("knows the metadata ranges in every spelling and leaves other addresses alone", () => {
    for (const address of [
      "169.254.169.254",
      "169.254.0.1",
      "fe80::1",
      "FD00:EC2::254",
      "100.100.100.200",
      "::ffff:169.254.169.254",
      "::ffff:a9fe:a9fe",
    ]) {
      expect(isMetadataAddress(address), address).toBe(true)
    }
    for (const address of ["127.0.0.1", "10.0.0.1", "::1", "192.168.1.1", "fd00::1", "::ffff:7f00:1"]) {
      expect(isMetadataAddress(address), address).toBe(false)
    }
  })
})
