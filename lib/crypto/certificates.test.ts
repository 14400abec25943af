import { execFileSync } from "node:child_process"
import { X509Certificate } from "node:crypto"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { createServer } from "node:https"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { connect } from "node:tls"
import { describe, expect, it, onTestFinished } from "vitest"
import { certificateAuthority, serverCertificate } from "./certificates.ts"

describe("certificates", () => {
  const authority = certificateAuthority("runnel test CA")
  const server = serverCertificate(authority, ["127.0.0.1", "::1", "localhost", "runnel.example.com"])

  it("makes a certificate authority that signs itself and may sign others", () => {
    const ca = new X509Certificate(authority.cert)
    expect(ca.subject).toBe("CN=runnel test CA")
    expect(ca.issuer).toBe("CN=runnel test CA")
    expect(ca.ca).toBe(true)
    expect(ca.verify(ca.publicKey)).toBe(true)
    expect(ca.keyUsage).toBeUndefined() // node lists extended key usage here; the CA has none
    expect(ca.validToDate.getTime() - Date.now()).toBeGreaterThan(9 * 365 * 24 * 60 * 60 * 1000)
  })

  it("signs a server certificate for the names and addresses given, and not for others", () => {
    const cert = new X509Certificate(server.cert)
    const ca = new X509Certificate(authority.cert)
    expect(cert.ca).toBe(false)
    expect(cert.checkIssued(ca)).toBe(true)
    expect(cert.verify(ca.publicKey)).toBe(true)
    expect(cert.checkIP("127.0.0.1")).toBe("127.0.0.1")
    expect(cert.checkIP("::1")).toBe("::1")
    expect(cert.checkHost("runnel.example.com")).toBe("runnel.example.com")
    expect(cert.checkHost("other.example.com")).toBeUndefined()
    expect(cert.checkIP("10.0.0.1")).toBeUndefined()
    expect(cert.keyUsage).toEqual(["1.3.6.1.5.5.7.3.1"])
  })

  it("serves TLS that a client trusting only the authority accepts, for a name in the certificate", async () => {
    const https = createServer({ cert: server.cert, key: server.key }, (_, res) => res.end("ok"))
    await new Promise<void>((resolve) => https.listen(0, "127.0.0.1", resolve))
    onTestFinished(() => new Promise<void>((resolve) => https.close(() => resolve())))
    const { port } = https.address() as AddressInfo
    const handshake = (servername: string | undefined) =>
      new Promise<{ authorized: boolean; error?: string }>((resolve) => {
        const socket = connect({ host: "127.0.0.1", port, ca: authority.cert, servername, rejectUnauthorized: false })
        socket.once("secureConnect", () => {
          resolve({ authorized: socket.authorized, error: socket.authorizationError?.toString() })
          socket.destroy()
        })
      })
    expect(await handshake(undefined)).toEqual({ authorized: true, error: undefined })
    expect(await handshake("runnel.example.com")).toEqual({ authorized: true, error: undefined })
    const wrongName = new Promise<string>((resolve) => {
      const socket = connect({ host: "127.0.0.1", port, ca: authority.cert, servername: "other.example.com" })
      socket.once("error", (error) => resolve(error.message))
    })
    expect(await wrongName).toMatch(/other\.example\.com/)
  })

  it("passes openssl's own verification as a server certificate", () => {
    const dir = mkdtempSync(join(tmpdir(), "runnel-certs-"))
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
    writeFileSync(join(dir, "ca.crt"), authority.cert)
    writeFileSync(join(dir, "server.crt"), server.cert)
    const out = execFileSync(
      "openssl",
      ["verify", "-CAfile", join(dir, "ca.crt"), "-purpose", "sslserver", join(dir, "server.crt")],
      { encoding: "utf8" },
    )
    expect(out).toContain("server.crt: OK")
  })
})
