import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto"
import { keyBytes } from "../lib/core/key-file.ts"

/**
 * Encryption at rest of stored object bodies (core Secrets), like Kubernetes'
 * EncryptionConfiguration with the aesgcm provider: AES-256-GCM, a random
 * 12-byte IV per write, the 16-byte tag, and the object's place (its storage
 * key, namespace and name) as additional authenticated data, so a ciphertext
 * copied onto another object's row does not decrypt.
 *
 * A sealed body is text: `prefix` + base64(iv ‖ ciphertext ‖ tag). A stored
 * body is JSON (an object, so it starts with `{`) when it was written before
 * encryption, which `open` reads as is.
 */

const ivBytes = 12
const tagBytes = 16
const prefix = "k8s:enc:aesgcm:v1:runnel:"
/** A key file holds the key in base64 (44 characters, a trailing newline allowed). */

export class SecretCipher {
  #key: Buffer

  constructor(key: Uint8Array) {
    if (key.byteLength !== keyBytes)
      throw new Error(`the secret key of the embedded Kubernetes API must be ${keyBytes} bytes, not ${key.byteLength}`)
    this.#key = Buffer.from(key)
  }

  static isSealed(text: string): boolean {
    return text.startsWith(prefix)
  }

  seal(plaintext: string, aad: string): string {
    const iv = randomBytes(ivBytes)
    const cipher = createCipheriv("aes-256-gcm", this.#key, iv, { authTagLength: tagBytes })
    cipher.setAAD(Buffer.from(aad, "utf8"))
    const ciphertext = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()])
    return prefix + Buffer.concat([iv, ciphertext, cipher.getAuthTag()]).toString("base64")
  }

  /** The plaintext of a sealed text; throws when the key or the additional data do not match, or it was altered. */
  unseal(sealed: string, aad: string): string {
    const bytes = Buffer.from(sealed.slice(prefix.length), "base64")
    if (bytes.length < ivBytes + tagBytes) throw new Error("the sealed text is truncated")
    const decipher = createDecipheriv("aes-256-gcm", this.#key, bytes.subarray(0, ivBytes), {
      authTagLength: tagBytes,
    })
    decipher.setAAD(Buffer.from(aad, "utf8"))
    decipher.setAuthTag(bytes.subarray(bytes.length - tagBytes))
    return Buffer.concat([
      decipher.update(bytes.subarray(ivBytes, bytes.length - tagBytes)),
      decipher.final(),
    ]).toString("utf8")
  }

  /** A stored body as text: sealed bodies are decrypted, others (written before encryption) returned as they are. */
  open(stored: string, aad: string): string {
    return SecretCipher.isSealed(stored) ? this.unseal(stored, aad) : stored
  }
}
