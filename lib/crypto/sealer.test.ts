import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto"
import { describe, expect, it } from "vitest"
import { keyBytes, keyFromPassphrase, packSealed, randomKey, type Sealed, Sealer, unpackSealed } from "./sealer.ts"

const aad = "runnel:test"

describe("Sealer", () => {
  it("gives back what it sealed, with the same key and additional data", () => {
    const sealer = new Sealer(randomKey())
    for (const text of ["s3cret", "", "pässwörd ✓ 🔑", "x".repeat(70_000)]) {
      expect(sealer.unseal(sealer.seal(text, aad), aad)).toBe(text)
    }
  })

  it("uses a fresh 12-byte IV for every value, so equal values do not look equal", () => {
    const sealer = new Sealer(randomKey())
    const one = sealer.seal("same", aad)
    const two = sealer.seal("same", aad)
    expect(one.iv).toHaveLength(12)
    expect(one.tag).toHaveLength(16)
    expect(Buffer.from(one.iv).equals(two.iv)).toBe(false)
    expect(Buffer.from(one.ciphertext).equals(two.ciphertext)).toBe(false)
  })

  it("opens nothing sealed with another key or other additional data, or altered in any part", () => {
    const key = randomKey()
    const sealer = new Sealer(key)
    const sealed = sealer.seal("value", aad)
    const flipped = (bytes: Uint8Array) => {
      const copy = Buffer.from(bytes)
      copy[0] = (copy[0] ?? 0) ^ 1
      return copy
    }
    expect(new Sealer(randomKey()).unseal(sealed, aad)).toBeUndefined()
    expect(sealer.unseal(sealed, "runnel:other")).toBeUndefined()
    expect(sealer.unseal({ ...sealed, iv: flipped(sealed.iv) }, aad)).toBeUndefined()
    expect(sealer.unseal({ ...sealed, tag: flipped(sealed.tag) }, aad)).toBeUndefined()
    expect(sealer.unseal({ ...sealed, ciphertext: flipped(sealed.ciphertext) }, aad)).toBeUndefined()
    expect(sealer.unseal({ ...sealed, tag: sealed.tag.subarray(0, 12) }, aad)).toBeUndefined()
    expect(sealer.unseal({ ...sealed, iv: Buffer.alloc(16) }, aad)).toBeUndefined()
    expect(new Sealer(key).unseal(sealed, aad)).toBe("value")
  })

  it("takes text additional data as its UTF-8 bytes", () => {
    const sealer = new Sealer(randomKey())
    expect(sealer.unseal(sealer.seal("v", "ä/b"), Buffer.from("ä/b", "utf8"))).toBe("v")
  })

  it("reads values sealed by plain AES-256-GCM, as runnel stored them before this module, and is read by it", () => {
    // A frozen vector: key 32 × 0x07, IV 12 × 0x01, the secret store's AAD of global/TOKEN.
    const key = Buffer.alloc(32, 7)
    const rowAad = Buffer.from(JSON.stringify(["runnel:secret", "global", "TOKEN"]), "utf8")
    const stored: Sealed = {
      iv: Buffer.alloc(12, 1),
      ciphertext: Buffer.from("05d2eac5f5cb", "hex"),
      tag: Buffer.from("2bd75508a0fdf916fbedf83f04d513ce", "hex"),
    }
    expect(new Sealer(key).unseal(stored, rowAad)).toBe("s3cret")

    const sealed = new Sealer(key).seal("s3cret", rowAad)
    const decipher = createDecipheriv("aes-256-gcm", key, sealed.iv, { authTagLength: 16 })
    decipher.setAAD(rowAad)
    decipher.setAuthTag(sealed.tag)
    expect(Buffer.concat([decipher.update(sealed.ciphertext), decipher.final()]).toString("utf8")).toBe("s3cret")
  })

  it("refuses a key that is not 32 bytes, naming it", () => {
    expect(() => new Sealer(randomBytes(16))).toThrow("an AES-256-GCM key must be 32 bytes, not 16")
    expect(() => new Sealer(randomBytes(33), "the test key")).toThrow("the test key must be 32 bytes, not 33")
  })

  it("keeps its own copy of the key, and zeroes it at close, after which it refuses to work", () => {
    const key = randomKey()
    const sealer = new Sealer(key)
    const sealed = sealer.seal("value", aad)
    key.fill(0)
    expect(sealer.unseal(sealed, aad)).toBe("value")
    sealer.close()
    sealer.close()
    expect(() => sealer.seal("value", aad)).toThrow("the sealer is closed")
    expect(() => sealer.unseal(sealed, aad)).toThrow("the sealer is closed")
  })
})

describe("keys", () => {
  it("are random 32 bytes, or the SHA-256 of a passphrase's UTF-8", () => {
    expect(randomKey()).toHaveLength(keyBytes)
    expect(randomKey().equals(randomKey())).toBe(false)
    expect(keyFromPassphrase("correct horse").toString("hex")).toBe(
      "4104d36f8da2c254349f85836793ebe029e0c957063a34c91c2e9203187b5631",
    )
  })
})

describe("packed sealed values", () => {
  it("are IV, ciphertext and tag in that order, and unpack to what was packed", () => {
    const sealed = new Sealer(randomKey()).seal("value", aad)
    const packed = packSealed(sealed)
    expect(packed.subarray(0, 12).equals(sealed.iv)).toBe(true)
    expect(packed.subarray(packed.length - 16).equals(sealed.tag)).toBe(true)
    const unpacked = unpackSealed(packed)
    for (const part of ["iv", "ciphertext", "tag"] as const) expect(Buffer.from(unpacked[part])).toEqual(sealed[part])
  })

  it("unpack from too few bytes into parts that do not unseal", () => {
    const key = randomKey()
    const packed = packSealed(new Sealer(key).seal("", aad))
    expect(packed).toHaveLength(28)
    for (const length of [0, 5, 12, 20, 27]) {
      expect(new Sealer(key).unseal(unpackSealed(packed.subarray(0, length)), aad), String(length)).toBeUndefined()
    }
  })

  it("match what node:crypto seals in the same layout", () => {
    const key = randomKey()
    const iv = randomBytes(12)
    const cipher = createCipheriv("aes-256-gcm", key, iv, { authTagLength: 16 })
    cipher.setAAD(Buffer.from(aad))
    const packed = Buffer.concat([iv, cipher.update("value", "utf8"), cipher.final(), cipher.getAuthTag()])
    expect(new Sealer(key).unseal(unpackSealed(packed), aad)).toBe("value")
  })
})
