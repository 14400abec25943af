import { checkKey, type KeyCheck } from "../lib/crypto/key-check.ts"
import { packSealed, type Sealed, Sealer, unpackSealed } from "../lib/crypto/sealer.ts"

/**
 * Encryption at rest of stored object bodies (core Secrets), like Kubernetes'
 * EncryptionConfiguration with the aesgcm provider: lib/crypto's sealer
 * (AES-256-GCM, a random 12-byte IV per write, the 16-byte tag) with the
 * object's place (its storage key, namespace and name) as additional
 * authenticated data, so a ciphertext copied onto another object's row does
 * not decrypt.
 *
 * A sealed body is text: `prefix` + base64(iv ‖ ciphertext ‖ tag). A stored
 * body is JSON (an object, so it starts with `{`) when it was written before
 * encryption, which `open` reads as is.
 */

const prefix = "k8s:enc:aesgcm:v1:runnel:"
/** The key check of a database, kept sealed (as text) in its kube_key_check table. */
const keyCheck: KeyCheck = { text: "runnel embedded Kubernetes API key check", aad: "kube_key_check" }

const toText = (sealed: Sealed) => prefix + packSealed(sealed).toString("base64")
const fromText = (text: string) => unpackSealed(Buffer.from(text.slice(prefix.length), "base64"))

export class SecretCipher {
  readonly #sealer: Sealer

  constructor(key: Uint8Array) {
    this.#sealer = new Sealer(key, "the secret key of the embedded Kubernetes API")
  }

  static isSealed(text: string): boolean {
    return text.startsWith(prefix)
  }

  seal(plaintext: string, aad: string): string {
    return toText(this.#sealer.seal(plaintext, aad))
  }

  /** The plaintext of a sealed text; throws when the key or the additional data do not match, or it was altered. */
  unseal(sealed: string, aad: string): string {
    const plaintext = this.#sealer.unseal(fromText(sealed), aad)
    if (plaintext === undefined) {
      throw new Error("the sealed text does not open: it was altered or truncated, or sealed with another key or data")
    }
    return plaintext
  }

  /** A stored body as text: sealed bodies are decrypted, others (written before encryption) returned as they are. */
  open(stored: string, aad: string): string {
    return SecretCipher.isSealed(stored) ? this.unseal(stored, aad) : stored
  }

  /**
   * True when this cipher's key is the one a database's Secrets are sealed
   * with (lib/crypto/key-check.ts). `stored` is the database's sealed key
   * check, undefined when it had none; `storeIfMissing` stores the one given
   * unless the database has one by now, atomically, and returns the one it has.
   */
  matchesKeyCheck(stored: string | undefined, storeIfMissing: (fresh: string) => string): boolean {
    return checkKey(this.#sealer, keyCheck, {
      stored: stored === undefined ? undefined : fromText(stored),
      storeIfMissing: (fresh) => fromText(storeIfMissing(toText(fresh))),
    }).matches
  }

  /** Zeroes the key; idempotent. */
  close(): void {
    this.#sealer.close()
  }
}
