import { createCipheriv, createDecipheriv, randomBytes, randomUUID } from "node:crypto"
import { chmodSync, closeSync, fsyncSync, linkSync, openSync, readFileSync, unlinkSync, writeSync } from "node:fs"

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

export const keyBytes = 32
const ivBytes = 12
const tagBytes = 16
const prefix = "k8s:enc:aesgcm:v1:runnel:"
/** A key file holds the key in base64 (44 characters, a trailing newline allowed). */
const keyFilePattern = /^[A-Za-z0-9+/]{43}=$/

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

const errorMessage = (error: unknown) => (error instanceof Error ? error.message : String(error))

/** The key in `file`, or undefined when there is no such file. */
export function readKeyFile(file: string): Buffer | undefined {
  let text: string
  try {
    text = readFileSync(file, "utf8").trim()
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined
    throw new Error(`cannot read the key file "${file}" of the embedded Kubernetes API: ${errorMessage(error)}`, {
      cause: error,
    })
  }
  // Never quote the content: it is the key, or something close to it.
  if (!keyFilePattern.test(text))
    throw new Error(
      `the key file "${file}" of the embedded Kubernetes API does not hold a key: it must hold ${keyBytes} random bytes in base64`,
    )
  return Buffer.from(text, "base64")
}

/**
 * Writes a new random key to `file`, readable by its owner alone (mode 0600).
 * The key goes to a temporary file first, which is then linked into place;
 * linking fails if the file exists, so of two processes creating it at once
 * one wins and the other reads the winner's key, never a half-written file.
 */
export function createKeyFile(file: string): Buffer {
  const key = randomBytes(keyBytes)
  const temp = `${file}.${randomUUID()}.tmp`
  try {
    const fd = openSync(temp, "wx", 0o600)
    try {
      writeSync(fd, `${key.toString("base64")}\n`)
      fsyncSync(fd)
    } finally {
      closeSync(fd)
    }
    // The umask only takes permissions away, but a filesystem may ignore the mode given to open().
    chmodSync(temp, 0o600)
    linkSync(temp, file)
    return key
  } catch (error) {
    key.fill(0)
    if ((error as NodeJS.ErrnoException).code === "EEXIST") {
      const winner = readKeyFile(file)
      if (winner !== undefined) return winner
    }
    throw new Error(`cannot create the key file "${file}" of the embedded Kubernetes API: ${errorMessage(error)}`, {
      cause: error,
    })
  } finally {
    try {
      unlinkSync(temp)
    } catch {
      // Never created, or already gone.
    }
  }
}
