import { X509Certificate } from "node:crypto"
import { connect, type DetailedPeerCertificate } from "node:tls"
import { stringify } from "yaml"
import type { ClientSettings } from "../lib/config/client.ts"
import { errorMessage, SystemError } from "../lib/core/errors.ts"

/**
 * What a TLS handshake with the server showed: no TLS there, or TLS with a chain Node trusts or not, and
 * the top of the chain it sent, with whether that is a root (signed by itself).
 */
type Handshake =
  | { readonly tls: false }
  | { readonly tls: true; readonly trusted: boolean; readonly top?: { pem: string; root: boolean } }

const handshakeTimeoutMs = 10_000

/**
 * `runnel kubeconfig`: prints a kubeconfig for kubectl against the server's
 * embedded Kubernetes API at /k8s, with the current login (the token of
 * --auth-token, CI_AUTH_TOKEN or ~/.runnel/auth.config; user:password@ of
 * the URL under Basic Auth). kubectl sends credentials over TLS only, so the
 * cluster's address is https whenever the server speaks TLS on its port
 * (with --tls-cert-file, or beside plain HTTP with its own certificate
 * authority); a certificate Node does not trust is pinned in the kubeconfig as
 * the authority the server presented, named on stderr with its fingerprint to
 * compare with the one `runnel server` printed at start.
 */
export async function printKubeconfig(settings: ClientSettings, namespace: string): Promise<void> {
  const url = new URL(settings.url)
  const port = Number(url.port || (url.protocol === "https:" ? 443 : 80))
  const handshake = await tryTls(url.hostname.replace(/^\[|\]$/g, ""), port, settings.url)
  const basePath = url.pathname.replace(/\/$/, "")
  const server = `${handshake.tls ? "https" : "http"}://${url.host}${basePath}/k8s`
  const cluster: Record<string, string> = { server }
  // A root the server sends is a private one (servers leave public roots out): kubectl, which knows only the
  // system's roots, needs it. An untrusted chain is pinned as presented, for the user to compare.
  const top = handshake.tls ? handshake.top : undefined
  if (handshake.tls && top !== undefined && (top.root || !handshake.trusted)) {
    cluster["certificate-authority-data"] = Buffer.from(top.pem).toString("base64")
    if (!handshake.trusted) {
      const authority = new X509Certificate(top.pem)
      process.stderr.write(
        `runnel: the kubeconfig trusts the certificate authority "${authority.subject}" that ${url.host} presented (SHA-256 ${authority.fingerprint256}); compare it with the fingerprint \`runnel server\` printed at start\n`,
      )
    }
  }
  const user = credentials(settings.authorization)
  if (Object.keys(user).length === 0) {
    process.stderr.write(
      `runnel: the kubeconfig has no credentials: none were given (--auth-token, CI_AUTH_TOKEN, \`runnel login -s ${settings.url}\`, or user:password@ in the URL); that is enough only for a server in open access\n`,
    )
  } else if (!handshake.tls) {
    process.stderr.write(
      `runnel: ${settings.url} serves no TLS and kubectl sends credentials over TLS only: start the server with authentication on (it then serves /k8s over TLS itself) or with --tls-cert-file\n`,
    )
  }
  process.stdout.write(
    stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [{ name: "runnel", cluster }],
      users: [{ name: "runnel", user }],
      contexts: [{ name: "runnel", context: { cluster: "runnel", user: "runnel", namespace } }],
      "current-context": "runnel",
    }),
  )
}

/** The kubeconfig user of an Authorization header: a token for Bearer, user name and password for Basic. */
function credentials(authorization: string | undefined): Record<string, string> {
  if (authorization === undefined) return {}
  const [scheme, value = ""] = authorization.split(" ", 2)
  if (scheme === "Bearer") return { token: value }
  const decoded = Buffer.from(value, "base64").toString("utf8")
  const colon = decoded.indexOf(":")
  return { username: decoded.slice(0, colon), password: decoded.slice(colon + 1) }
}

/**
 * Whether the server speaks TLS on `port`: a handshake that does not verify
 * (the kubeconfig pins what it finds) and a connection that reaches the port
 * but gets no TLS back (a plain HTTP server answers the handshake with an
 * HTTP error) both answer; a port nobody listens on is an error.
 */
function tryTls(host: string, port: number, url: string): Promise<Handshake> {
  return new Promise((resolve, reject) => {
    let reached = false
    const socket = connect({
      host,
      port,
      ...(/^[\d.]+$|:/.test(host) ? {} : { servername: host }),
      rejectUnauthorized: false,
      ALPNProtocols: ["http/1.1"],
    })
    socket.setTimeout(handshakeTimeoutMs, () =>
      socket.destroy(new Error(`no TLS handshake within ${handshakeTimeoutMs / 1000} s`)),
    )
    socket.once("connect", () => {
      reached = true
    })
    socket.once("secureConnect", () => {
      const chain = socket.getPeerCertificate(true)
      resolve({ tls: true, trusted: socket.authorized, top: topOf(chain) })
      socket.destroy()
    })
    socket.once("error", (error: NodeJS.ErrnoException) => {
      if (reached) resolve({ tls: false })
      else
        reject(
          new SystemError(
            `cannot reach the runnel server at ${url}: ${error.code ?? errorMessage(error)}; start it with \`runnel server\` or point --server-url (CI_SERVER_URL) at it`,
          ),
        )
    })
  })
}

/** The last certificate of the chain the server sent (its authority, when it sends one), as PEM. */
function topOf(chain: DetailedPeerCertificate): { pem: string; root: boolean } | undefined {
  if (chain.raw === undefined) return undefined
  let top = chain
  while (top.issuerCertificate !== undefined && top.issuerCertificate !== top) top = top.issuerCertificate
  const lines = top.raw.toString("base64").match(/.{1,64}/g) ?? []
  const pem = `-----BEGIN CERTIFICATE-----\n${lines.join("\n")}\n-----END CERTIFICATE-----\n`
  const certificate = new X509Certificate(pem)
  return { pem, root: certificate.checkIssued(certificate) && certificate.verify(certificate.publicKey) }
}
