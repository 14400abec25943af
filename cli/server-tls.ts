import { X509Certificate } from "node:crypto"
import { readFileSync, writeFileSync } from "node:fs"
import { hostname, networkInterfaces } from "node:os"
import type { AuthSettings } from "../lib/config/auth.ts"
import type { HttpSettings } from "../lib/config/server.ts"
import { badRequest, errorMessage, SystemError } from "../lib/core/errors.ts"
import { type CertifiedKey, certificateAuthority, serverCertificate } from "../lib/crypto/certificates.ts"

/**
 * What `runnel server` serves TLS with, if anything (docs/decisions.md, "kubectl and TLS"):
 * - `--tls-cert-file`/`--tls-private-key-file`: that certificate, HTTPS only, for everything.
 * - authentication on and the embedded API served, no files: a certificate from runnel's own
 *   certificate authority, spoken on the same port beside plain HTTP (the first byte of a connection
 *   tells which), so that kubectl, which sends credentials over TLS only, can reach /k8s while every
 *   other client keeps its http:// URL.
 * - otherwise none.
 */
export type ServedTls = CertifiedKey & {
  /** Plain HTTP is served on the same port too. */
  readonly besidePlainHttp: boolean
  /** runnel's own authority, when it made the certificate: the line that names it at start. */
  readonly authority?: { readonly file: string; readonly fingerprint: string }
}

export function servedTls(
  settings: {
    readonly http: HttpSettings
    readonly auth: AuthSettings
    readonly embedded: boolean
    readonly storagePath: string
  },
  now = new Date(),
): ServedTls | undefined {
  const { tls } = settings.http
  if (tls !== undefined) {
    return {
      cert: readPem(tls.certFile, "tls-cert-file"),
      key: readPem(tls.keyFile, "tls-private-key-file"),
      besidePlainHttp: false,
    }
  }
  if (settings.auth.mode === "open" || !settings.embedded) return undefined
  const { authority, file } = keptAuthority(settings.storagePath, now)
  const server = serverCertificate(authority, serverNames(settings.http.host, settings.auth), now)
  return {
    cert: `${server.cert}${authority.cert}`,
    key: server.key,
    besidePlainHttp: true,
    authority: { file, fingerprint: fingerprint(authority.cert) },
  }
}

/** SHA-256 of a PEM certificate's DER, as `openssl x509 -fingerprint -sha256` prints it. */
export function fingerprint(pem: string): string {
  return new X509Certificate(pem).fingerprint256
}

function readPem(file: string, flag: string): string {
  try {
    const text = readFileSync(file, "utf8")
    if (!text.includes("-----BEGIN ")) throw new Error("it holds no PEM block")
    return text
  } catch (error) {
    throw badRequest(`cannot read --${flag} "${file}": ${errorMessage(error)}`)
  }
}

/**
 * runnel's certificate authority, kept beside the database (`<db>.ca.crt`, and `<db>.ca.key` readable by
 * its owner alone) so that kubeconfigs printed once keep working across restarts; made at the first start.
 * For a database in memory, one for this process only.
 */
function keptAuthority(storagePath: string, now: Date): { authority: CertifiedKey; file: string } {
  if (storagePath === ":memory:") return { authority: certificateAuthority("runnel CA", now), file: "(in memory)" }
  const certFile = `${storagePath}.ca.crt`
  const keyFile = `${storagePath}.ca.key`
  const existing = [readIfThere(certFile), readIfThere(keyFile)] as const
  if (existing[0] !== undefined && existing[1] !== undefined) {
    return { authority: { cert: existing[0], key: existing[1] }, file: certFile }
  }
  if (existing[0] !== undefined || existing[1] !== undefined) {
    throw new SystemError(
      `${existing[0] === undefined ? certFile : keyFile} is there without ${existing[0] === undefined ? keyFile : certFile}; restore it, or remove both to make a new certificate authority (kubeconfigs printed before must then be printed again)`,
    )
  }
  const authority = certificateAuthority(`runnel CA ${hostname()}`, now)
  try {
    writeFileSync(keyFile, authority.key, { flag: "wx", mode: 0o600 })
    writeFileSync(certFile, authority.cert, { flag: "wx", mode: 0o644 })
  } catch (error) {
    throw new SystemError(`cannot keep the certificate authority beside the database: ${errorMessage(error)}`)
  }
  return { authority, file: certFile }
}

function readIfThere(file: string): string | undefined {
  try {
    return readFileSync(file, "utf8")
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined
    throw new SystemError(`cannot read ${file}: ${errorMessage(error)}`)
  }
}

/**
 * The names clients may reach the server by: loopback, this machine's name, the --host address (every
 * address of the machine when it is a wildcard), and the host of the OAuth callback URL, the public one.
 */
function serverNames(host: string, auth: AuthSettings): string[] {
  const wildcard = host === "0.0.0.0" || host === "::"
  const addresses = wildcard
    ? Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((entry) => entry.address.split("%")[0]))
    : [host]
  const publicHost = auth.mode === "oauth" ? [new URL(auth.callbackUrl).hostname.replace(/^\[|\]$/g, "")] : []
  return [
    ...new Set(["localhost", "127.0.0.1", "::1", hostname(), ...addresses, ...publicHost].filter(Boolean)),
  ] as string[]
}
