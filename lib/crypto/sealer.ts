import { createCipheriv, createDecipheriv, createHash, randomBytes } from "node:crypto"

/**
 * Encryption at rest, written once: AES-256-GCM with a random 12-byte IV per
 * value, the full 16-byte tag, and additional authenticated data (AAD) that
 * binds a value to its place (a store's row, an object's key), so that a
 * ciphertext copied to another place does not open there. The secret store
 * (lib/secrets) and the embedded API's Secrets (kubeserver) both seal with it;
 * each keeps the parts in its own stored form (columns, or text).
 */

/** An AES-256 key: 32 bytes. */
export const keyBytes = 32
const ivBytes = 12
const tagBytes = 16

/** One sealed value. The IV and tag are not secret; the value cannot be opened without both. */
export type Sealed = { readonly iv: Uint8Array; readonly tag: Uint8Array; readonly ciphertext: Uint8Array }
/** Additional authenticated data: stored nowhere, given again to open. A string is taken as UTF-8. */
export type Aad = string | Uint8Array

/** A new random key, for data that lives as long as the process (an in-memory database). */
export const randomKey = (): Buffer => randomBytes(keyBytes)

/** The key of a passphrase as interface.md fixes it: the SHA-256 of its UTF-8 bytes. */
export const keyFromPassphrase = (passphrase: string): Buffer =>
  createHash("sha256").update(passphrase, "utf8").digest()

export class Sealer {
  readonly #key: Buffer
  #closed = false

  /** `named` is how a key of the wrong length is named in the error: `the secret key of ...`. */
  constructor(key: Uint8Array, named = "an AES-256-GCM key") {
    if (key.byteLength !== keyBytes) throw new Error(`${named} must be ${keyBytes} bytes, not ${key.byteLength}`)
    // A copy: the caller may zero or reuse its buffer, and close() zeroes this one.
    this.#key = Buffer.from(key)
  }

  seal(plaintext: string, aad: Aad): Sealed {
    this.#assertOpen()
    // A fresh IV per value: GCM with a key and IV used twice leaks the XOR of the plaintexts and the authentication key.
    const iv = randomBytes(ivBytes)
    const cipher = createCipheriv("aes-256-gcm", this.#key, iv, { authTagLength: tagBytes })
    cipher.setAAD(typeof aad === "string" ? Buffer.from(aad, "utf8") : aad)
    const ciphertext = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()])
    return { iv, tag: cipher.getAuthTag(), ciphertext }
  }

  /** The plaintext, or undefined when the key, the AAD or any stored byte is not what sealed it. */
  unseal(sealed: Sealed, aad: Aad): string | undefined {
    this.#assertOpen()
    if (sealed.iv.length !== ivBytes || sealed.tag.length !== tagBytes) return undefined
    try {
      const decipher = createDecipheriv("aes-256-gcm", this.#key, sealed.iv, { authTagLength: tagBytes })
      decipher.setAAD(typeof aad === "string" ? Buffer.from(aad, "utf8") : aad)
      decipher.setAuthTag(sealed.tag)
      // final() throws when the tag does not verify; update()'s output is not to be trusted before it.
      return Buffer.concat([decipher.update(sealed.ciphertext), decipher.final()]).toString("utf8")
    } catch {
      return undefined
    }
  }

  /** Zeroes the key; idempotent. Sealing or unsealing afterwards throws. */
  close(): void {
    this.#closed = true
    this.#key.fill(0)
  }

  #assertOpen(): void {
    // A zeroed key would still "work": refuse rather than seal with it.
    if (this.#closed) throw new Error("the sealer is closed")
  }
}

/** A sealed value as one run of bytes, iv ‖ ciphertext ‖ tag: the layout of Kubernetes' aesgcm provider. */
export function packSealed(sealed: Sealed): Buffer {
  return Buffer.concat([sealed.iv, sealed.ciphertext, sealed.tag])
}

/** The parts of packed bytes. Bytes too short to hold an IV and a tag give parts that do not unseal. */
export function unpackSealed(bytes: Uint8Array): Sealed {
  const tagStart = Math.max(ivBytes, bytes.length - tagBytes)
  return {
    iv: bytes.subarray(0, ivBytes),
    ciphertext: bytes.subarray(ivBytes, tagStart),
    tag: bytes.subarray(tagStart),
  }
}
