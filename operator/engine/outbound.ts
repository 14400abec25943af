import type { LookupAddress } from "node:dns"
import { lookup as dnsLookup } from "node:dns/promises"
import { request as httpRequest, type IncomingMessage } from "node:http"
import { request as httpsRequest } from "node:https"
import { isIP, type LookupFunction } from "node:net"
import type { Readable } from "node:stream"
import { createBrotliDecompress, createGunzip, createInflate } from "node:zlib"
import { formatDuration } from "../../lib/core/duration.ts"

/**
 * The operator's one way to the network on a pipeline's behalf: a script's
 * fetch(), its notifications and native git resources. Whatever a pipeline
 * names, these rules hold:
 * - only `http:` and `https:`, on every hop of a redirect;
 * - cloud metadata addresses are refused unless the server allows them
 *   (`--allow-metadata-addresses`), checked on the addresses the name
 *   resolves to (the connection uses exactly those) and again on each hop;
 * - nothing of the host is added: no cookies, no proxy from the environment,
 *   no pooled connection shared with anything else;
 * - the whole exchange, redirects and body included, ends at `timeoutMs`,
 *   and a body beyond `maxResponseBytes` (decoded) is refused, not truncated.
 */
export type OutboundPolicy = {
  /** `--allow-metadata-addresses`: reach 169.254.169.254 and the like. */
  readonly allowMetadataAddresses: boolean
  /** Resolves a host name to its addresses; the system's resolver (dns.lookup) unless given. */
  readonly resolve?: (hostname: string) => Promise<LookupAddress[]>
}

export type OutboundRequest = {
  readonly url: string
  readonly method: string
  readonly headers: readonly (readonly [string, string])[]
  readonly body?: Uint8Array
  readonly timeoutMs: number
  /** Redirects followed before the request is refused; 0 returns the redirect itself. */
  readonly maxRedirects: number
  readonly maxResponseBytes: number
  /** How the size limit is set, named in the message when it is hit (`--fetch-max-response-mb`). */
  readonly sizeLimitName: string
  readonly signal: AbortSignal
}

export type OutboundResponse = {
  readonly status: number
  readonly statusText: string
  /** Where the answer came from, after redirects. */
  readonly url: string
  /** In the order received, names in lower case; a repeated header is repeated. */
  readonly headers: readonly (readonly [string, string])[]
  readonly body: Buffer
}

/** A request refused or failed for a reason the pipeline should read: its message says which. */
export class OutboundError extends Error {
  constructor(message: string) {
    super(message)
    this.name = "OutboundError"
  }
}

/**
 * Hop-by-hop and framing headers runnel sets itself; a pipeline's values for
 * them are dropped, as the WHATWG fetch standard drops its forbidden headers.
 */
const framingHeaders = new Set([
  "host",
  "content-length",
  "transfer-encoding",
  "connection",
  "keep-alive",
  "upgrade",
  "te",
  "trailer",
])

const redirectStatuses = new Set([301, 302, 303, 307, 308])

/** Sends one request under the policy, following redirects; rejects with an OutboundError naming what was refused or hit. */
export async function sendOutbound(request: OutboundRequest, policy: OutboundPolicy): Promise<OutboundResponse> {
  const timeout = AbortSignal.timeout(request.timeoutMs)
  const signal = AbortSignal.any([request.signal, timeout])
  let url = parseUrl(request.url)
  let method = request.method
  let body = request.body
  let headers = request.headers.filter(([name]) => !framingHeaders.has(name.toLowerCase()))
  try {
    for (let redirects = 0; ; redirects++) {
      checkAddress(url, policy)
      const response = await exchange(url, method, headers, body, policy, signal)
      const location = response.headers.location
      if (!redirectStatuses.has(response.statusCode ?? 0) || location === undefined || request.maxRedirects === 0) {
        return await answer(url, response, request, signal)
      }
      response.resume()
      if (redirects >= request.maxRedirects) {
        throw new OutboundError(`more than ${request.maxRedirects} redirects, the limit (the last to ${location})`)
      }
      let next: URL
      try {
        next = new URL(location, url)
      } catch {
        throw new OutboundError(`the server redirected to ${JSON.stringify(location)}, which is not a URL`)
      }
      checkScheme(next, "redirected to")
      // As browsers do: a 303, or a 301/302 after a POST, continues as a GET without the body.
      if (response.statusCode === 303 || ((response.statusCode ?? 0) < 303 && method === "POST")) {
        method = method === "HEAD" ? "HEAD" : "GET"
        body = undefined
        headers = headers.filter(([name]) => !name.toLowerCase().startsWith("content-"))
      }
      // Credentials meant for one origin do not follow a redirect to another.
      if (next.origin !== url.origin) {
        headers = headers.filter(
          ([name]) => !["authorization", "cookie", "proxy-authorization"].includes(name.toLowerCase()),
        )
      }
      url = next
    }
  } catch (error) {
    if (timeout.aborted && !request.signal.aborted) {
      throw new OutboundError(`no complete answer within ${formatDuration(request.timeoutMs)}, the timeout`)
    }
    if (request.signal.aborted) throw request.signal.reason
    if (error instanceof OutboundError) throw error
    throw new OutboundError(networkMessage(error))
  }
}

/** The URL if it is one runnel may request: http or https. */
export function parseUrl(text: string): URL {
  let url: URL
  try {
    url = new URL(text)
  } catch {
    throw new OutboundError(
      `${JSON.stringify(text)} is not a valid URL; write it in full, such as https://example.com/path`,
    )
  }
  checkScheme(url, "requested")
  return url
}

function checkScheme(url: URL, how: string): void {
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new OutboundError(
      `${how} ${url.protocol} URL ${url.href.slice(0, 100)}: only http: and https: URLs are allowed`,
    )
  }
}

function checkAddress(url: URL, policy: OutboundPolicy): void {
  const host = url.hostname.replace(/^\[|\]$/g, "")
  if (isIP(host) !== 0) refuseMetadata(host, host, policy)
}

function refuseMetadata(address: string, host: string, policy: OutboundPolicy): void {
  if (policy.allowMetadataAddresses || !isMetadataAddress(address)) return
  const resolved = address === host ? "" : ` (it resolves to ${address})`
  throw new OutboundError(
    `${host}${resolved} is a cloud metadata address, which pipelines may not reach; the server allows it with --allow-metadata-addresses`,
  )
}

/**
 * Addresses where clouds serve instance credentials: the IPv4 and IPv6
 * link-local ranges (AWS, GCP, Azure, OpenStack, DigitalOcean use
 * 169.254.169.254; Oracle 169.254.169.254 and 169.254.0.x), AWS's IPv6
 * fd00:ec2::254 and Alibaba's 100.100.100.200, also as IPv4-mapped IPv6.
 */
export function isMetadataAddress(address: string): boolean {
  const v4 = isIP(address) === 4 ? address : mappedIpv4(address)
  if (v4 !== undefined) return v4.startsWith("169.254.") || v4 === "100.100.100.200"
  const lower = address.toLowerCase()
  return /^fe[89ab][0-9a-f]:/.test(lower) || lower === "fd00:ec2::254"
}

/** The IPv4 address inside an IPv4-mapped IPv6 one (`::ffff:169.254.169.254`, or as URLs write it `::ffff:a9fe:a9fe`). */
function mappedIpv4(address: string): string | undefined {
  const dotted = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)
  if (dotted !== null) return dotted[1]
  const hex = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i.exec(address)
  if (hex === null) return undefined
  const high = Number.parseInt(hex[1] as string, 16)
  const low = Number.parseInt(hex[2] as string, 16)
  return `${high >> 8}.${high & 255}.${low >> 8}.${low & 255}`
}

/** dns.lookup, but every address a name resolves to is checked before the connection uses one. */
function guardedLookup(policy: OutboundPolicy): LookupFunction {
  return (hostname, options, callback) => {
    const resolve = policy.resolve ?? ((name: string) => dnsLookup(name, { family: options.family ?? 0, all: true }))
    resolve(hostname).then(
      (addresses) => {
        try {
          if (addresses.length === 0)
            throw Object.assign(new Error(`${hostname} has no address`), { code: "ENOTFOUND" })
          for (const { address } of addresses) refuseMetadata(address, hostname, policy)
        } catch (refused) {
          return callback(refused as NodeJS.ErrnoException, "", 0)
        }
        if (options.all === true) return (callback as unknown as (e: null, a: LookupAddress[]) => void)(null, addresses)
        const first = addresses[0] as LookupAddress
        callback(null, first.address, first.family)
      },
      (error: NodeJS.ErrnoException) => callback(error, "", 0),
    )
  }
}

function exchange(
  url: URL,
  method: string,
  headers: readonly (readonly [string, string])[],
  body: Uint8Array | undefined,
  policy: OutboundPolicy,
  signal: AbortSignal,
): Promise<IncomingMessage> {
  const send = url.protocol === "https:" ? httpsRequest : httpRequest
  const sent: Record<string, string | string[]> = {}
  for (const [name, value] of headers) {
    const key = name.toLowerCase()
    const earlier = sent[key]
    sent[key] = earlier === undefined ? value : [...(Array.isArray(earlier) ? earlier : [earlier]), value]
  }
  sent["accept-encoding"] ??= "gzip, deflate, br"
  return new Promise((resolve, reject) => {
    const outgoing = send(url, {
      method,
      headers: sent,
      // A fresh agent: no pooled connection, no proxy taken from the environment.
      agent: false,
      lookup: guardedLookup(policy),
      signal,
    })
    outgoing.on("response", resolve)
    outgoing.on("error", reject)
    outgoing.end(body)
  })
}

async function answer(
  url: URL,
  response: IncomingMessage,
  request: OutboundRequest,
  signal: AbortSignal,
): Promise<OutboundResponse> {
  const limit = request.maxResponseBytes
  const tooLarge = () =>
    new OutboundError(`the response is larger than ${formatBytes(limit)}, the limit (${request.sizeLimitName})`)
  const declared = Number(response.headers["content-length"])
  if (Number.isFinite(declared) && declared > limit && response.headers["content-encoding"] === undefined) {
    response.destroy()
    throw tooLarge()
  }
  const chunks: Buffer[] = []
  let size = 0
  const decoded = decode(response)
  try {
    for await (const chunk of decoded) {
      size += (chunk as Buffer).length
      if (size > limit) throw tooLarge()
      chunks.push(chunk as Buffer)
    }
  } catch (error) {
    signal.throwIfAborted()
    throw error instanceof OutboundError ? error : new OutboundError(`reading the response: ${networkMessage(error)}`)
  } finally {
    response.destroy()
    if (decoded !== response) decoded.destroy()
  }
  const headers: [string, string][] = []
  for (let at = 0; at < response.rawHeaders.length; at += 2) {
    headers.push([(response.rawHeaders[at] as string).toLowerCase(), response.rawHeaders[at + 1] as string])
  }
  return {
    status: response.statusCode ?? 0,
    statusText: response.statusMessage ?? "",
    url: url.href,
    headers,
    body: Buffer.concat(chunks),
  }
}

/** The body as the server meant it: gzip, deflate and br are undone, as fetch() does; the size limit counts these bytes. */
function decode(response: IncomingMessage): Readable {
  const encoding = String(response.headers["content-encoding"] ?? "")
    .trim()
    .toLowerCase()
  const decoder =
    encoding === "gzip" || encoding === "x-gzip"
      ? createGunzip()
      : encoding === "deflate"
        ? createInflate()
        : encoding === "br"
          ? createBrotliDecompress()
          : undefined
  if (decoder === undefined) return response
  response.on("error", (error) => decoder.destroy(error))
  return response.pipe(decoder)
}

function networkMessage(error: unknown): string {
  const code = (error as NodeJS.ErrnoException)?.code
  const message = error instanceof Error ? error.message : String(error)
  return code === undefined || message.includes(code) ? message : `${code}: ${message}`
}

export function formatBytes(bytes: number): string {
  if (bytes % (1024 * 1024) === 0) return `${bytes / (1024 * 1024)} MiB`
  if (bytes % 1024 === 0) return `${bytes / 1024} KiB`
  return `${bytes} bytes`
}
