import {
  createHash,
  createPrivateKey,
  generateKeyPairSync,
  type KeyObject,
  randomBytes,
  sign,
  X509Certificate,
} from "node:crypto"
import { isIP } from "node:net"

// X.509 certificates for a server that has none of its own: a certificate authority, and server
// certificates it signs. node:crypto reads certificates (X509Certificate) but cannot make them, and
// runnel adds no package or external program for it, so this file writes the few DER structures of
// RFC 5280 it needs: ECDSA P-256 keys signed with SHA-256, the extensions kubectl's Go verifier and
// OpenSSL require (basic constraints, key usage, extended key usage, subject alternative names,
// key identifiers), nothing else.

/** A certificate and its private key, both PEM. */
export type CertifiedKey = { readonly cert: string; readonly key: string }

const years = (count: number, from: Date) => new Date(from.getTime() + count * 365 * 24 * 60 * 60 * 1000)
// Clocks of clients run behind a little; a certificate valid from an hour ago is valid on them too.
const notBeforeSlackMs = 60 * 60 * 1000

/** A self-signed certificate authority named `commonName`, valid for ten years. */
export function certificateAuthority(commonName: string, now = new Date()): CertifiedKey {
  const { publicKey, privateKey } = generateKeyPairSync("ec", { namedCurve: "P-256" })
  const name = distinguishedName(commonName)
  const cert = signed(
    {
      issuer: name,
      subject: name,
      publicKey,
      notBefore: new Date(now.getTime() - notBeforeSlackMs),
      notAfter: years(10, now),
      extensions: [
        extension(oids.basicConstraints, true, sequence(boolean(true))),
        extension(oids.keyUsage, true, keyUsage({ digitalSignature: true, keyCertSign: true, cRLSign: true })),
        extension(oids.subjectKeyIdentifier, false, octetString(keyIdentifier(publicKey))),
      ],
    },
    privateKey,
  )
  return { cert, key: privateKey.export({ type: "pkcs8", format: "pem" }) as string }
}

/**
 * A server certificate for `hosts` (DNS names and IP addresses), signed by
 * `authority`, valid until the authority expires: it is made again at every
 * start, so it always names the addresses the server has then.
 */
export function serverCertificate(authority: CertifiedKey, hosts: readonly string[], now = new Date()): CertifiedKey {
  const issuer = new X509Certificate(authority.cert)
  const issuerKey = createPrivateKey(authority.key)
  const { publicKey, privateKey } = generateKeyPairSync("ec", { namedCurve: "P-256" })
  const names = [...new Set(hosts)]
  const cert = signed(
    {
      issuer: issuerName(issuer.raw),
      subject: distinguishedName(names[0] ?? "runnel"),
      publicKey,
      notBefore: new Date(now.getTime() - notBeforeSlackMs),
      notAfter: issuer.validToDate,
      extensions: [
        extension(oids.basicConstraints, true, sequence()),
        extension(oids.keyUsage, true, keyUsage({ digitalSignature: true })),
        extension(oids.extendedKeyUsage, false, sequence(objectId(oids.serverAuth))),
        extension(oids.subjectAltName, false, sequence(...names.map(generalName))),
        extension(oids.authorityKeyIdentifier, false, sequence(tlv(0x80, keyIdentifier(issuer.publicKey)))),
      ],
    },
    issuerKey,
  )
  return { cert, key: privateKey.export({ type: "pkcs8", format: "pem" }) as string }
}

type Fields = {
  issuer: Buffer
  subject: Buffer
  publicKey: KeyObject
  notBefore: Date
  notAfter: Date
  extensions: Buffer[]
}

/** RFC 5280 section 4.1: the to-be-signed part, then the signature over it. */
function signed(fields: Fields, signer: KeyObject): string {
  const algorithm = sequence(objectId(oids.ecdsaWithSha256))
  const serial = randomBytes(16)
  serial[0] = ((serial[0] ?? 0) & 0x7f) | 0x40 // positive, and no leading zero byte to strip
  const tbs = sequence(
    tlv(0xa0, integer(Buffer.from([2]))), // v3
    integer(serial),
    algorithm,
    fields.issuer,
    sequence(time(fields.notBefore), time(fields.notAfter)),
    fields.subject,
    fields.publicKey.export({ type: "spki", format: "der" }),
    tlv(0xa3, sequence(...fields.extensions)),
  )
  // node signs ECDSA in DER (dsaEncoding "der"), the encoding X.509 carries.
  const signature = sign("sha256", tbs, signer)
  const der = sequence(tbs, algorithm, bitString(signature))
  const lines = der.toString("base64").match(/.{1,64}/g) ?? []
  return `-----BEGIN CERTIFICATE-----\n${lines.join("\n")}\n-----END CERTIFICATE-----\n`
}

const oids = {
  ecdsaWithSha256: "1.2.840.10045.4.3.2",
  commonName: "2.5.4.3",
  subjectKeyIdentifier: "2.5.29.14",
  keyUsage: "2.5.29.15",
  subjectAltName: "2.5.29.17",
  basicConstraints: "2.5.29.19",
  authorityKeyIdentifier: "2.5.29.35",
  extendedKeyUsage: "2.5.29.37",
  serverAuth: "1.3.6.1.5.5.7.3.1",
} as const

function tlv(tag: number, ...parts: Buffer[]): Buffer {
  const content = Buffer.concat(parts)
  const length = content.length
  let header: Buffer
  if (length < 0x80) header = Buffer.from([tag, length])
  else {
    const bytes: number[] = []
    for (let rest = length; rest > 0; rest = Math.floor(rest / 256)) bytes.unshift(rest % 256)
    header = Buffer.from([tag, 0x80 | bytes.length, ...bytes])
  }
  return Buffer.concat([header, content])
}

const sequence = (...parts: Buffer[]) => tlv(0x30, ...parts)
const boolean = (value: boolean) => tlv(0x01, Buffer.from([value ? 0xff : 0]))
const octetString = (bytes: Buffer) => tlv(0x04, bytes)
const bitString = (bytes: Buffer, unusedBits = 0) => tlv(0x03, Buffer.from([unusedBits]), bytes)

function integer(bytes: Buffer): Buffer {
  return tlv(0x02, (bytes[0] ?? 0) & 0x80 ? Buffer.concat([Buffer.from([0]), bytes]) : bytes)
}

function objectId(dotted: string): Buffer {
  const [first = 0, second = 0, ...rest] = dotted.split(".").map(Number)
  const bytes = [first * 40 + second]
  for (const arc of rest) {
    const base128 = [arc & 0x7f]
    for (let value = arc >>> 7; value > 0; value >>>= 7) base128.unshift((value & 0x7f) | 0x80)
    bytes.push(...base128)
  }
  return tlv(0x06, Buffer.from(bytes))
}

/** UTCTime until 2049, GeneralizedTime after, as RFC 5280 section 4.1.2.5 requires. */
function time(date: Date): Buffer {
  const text = date.toISOString().replace(/[-:T]|\.\d+/g, "")
  return date.getUTCFullYear() < 2050 ? tlv(0x17, Buffer.from(text.slice(2))) : tlv(0x18, Buffer.from(text))
}

const distinguishedName = (commonName: string) =>
  sequence(tlv(0x31, sequence(objectId(oids.commonName), tlv(0x0c, Buffer.from(commonName)))))

/** The subject of a DER certificate, byte for byte, to be the issuer of the certificates it signs. */
function issuerName(certificate: Buffer): Buffer {
  const tbs = contents(certificate, 0).children[0]
  if (tbs === undefined) throw new Error("the certificate authority's certificate is not DER")
  // version, serial, signature algorithm, issuer, validity, subject
  const subject = contents(certificate, tbs.start).children[5]
  if (subject === undefined) throw new Error("the certificate authority's certificate has no subject")
  return certificate.subarray(subject.start, subject.end)
}

/** The element at `offset` and where its children start and end (enough DER reading for issuerName). */
function contents(der: Buffer, offset: number): { children: { start: number; end: number }[] } {
  const element = (at: number) => {
    const first = der[at + 1] ?? 0
    let length = first
    let header = 2
    if (first & 0x80) {
      length = 0
      for (let i = 0; i < (first & 0x7f); i++) length = length * 256 + (der[at + 2 + i] ?? 0)
      header += first & 0x7f
    }
    return { start: at, body: at + header, end: at + header + length }
  }
  const outer = element(offset)
  const children: { start: number; end: number }[] = []
  for (let at = outer.body; at < outer.end; ) {
    const child = element(at)
    children.push({ start: child.start, end: child.end })
    at = child.end
  }
  return { children }
}

function extension(oid: string, critical: boolean, value: Buffer): Buffer {
  return sequence(objectId(oid), ...(critical ? [boolean(true)] : []), octetString(value))
}

function keyUsage(uses: { digitalSignature?: boolean; keyCertSign?: boolean; cRLSign?: boolean }): Buffer {
  // Bit 0 is the most significant bit of the first byte: digitalSignature(0), keyCertSign(5), cRLSign(6).
  const byte = (uses.digitalSignature ? 0x80 : 0) | (uses.keyCertSign ? 0x04 : 0) | (uses.cRLSign ? 0x02 : 0)
  let unused = 0
  while (unused < 7 && ((byte >> unused) & 1) === 0) unused++
  return bitString(Buffer.from([byte]), unused)
}

/** RFC 5280 section 4.2.1.2, method 1: SHA-1 of the public key's bits. */
function keyIdentifier(publicKey: KeyObject): Buffer {
  const spki = publicKey.export({ type: "spki", format: "der" })
  // SubjectPublicKeyInfo is SEQUENCE { algorithm, subjectPublicKey BIT STRING }; P-256 keys are short, so the
  // BIT STRING has a two-byte header, then its unused-bits byte, then the key.
  const bits = contents(spki, 0).children[1]
  if (bits === undefined) throw new Error("the public key is not DER")
  return createHash("sha1")
    .update(spki.subarray(bits.start + 3, bits.end))
    .digest()
}

/** A subject alternative name: iPAddress [7] for an address, dNSName [2] for anything else. */
function generalName(host: string): Buffer {
  const version = isIP(host)
  if (version === 4) return tlv(0x87, Buffer.from(host.split(".").map(Number)))
  if (version === 6) return tlv(0x87, ipv6Bytes(host))
  return tlv(0x82, Buffer.from(host, "ascii"))
}

function ipv6Bytes(address: string): Buffer {
  const [head = "", tail] = address.split("::")
  const groups = (text: string) => (text === "" ? [] : text.split(":"))
  const left = groups(head)
  const right = tail === undefined ? [] : groups(tail)
  const all = [...left, ...Array(8 - left.length - right.length).fill("0"), ...right]
  return Buffer.from(all.flatMap((group) => [Number.parseInt(group, 16) >> 8, Number.parseInt(group, 16) & 0xff]))
}
