import { describe, expect, it } from "vitest"
import { Redactor } from "./redactor.ts"

const mask = "***REDACTED***"

function streamed(redactor: Redactor, chunks: readonly string[]): string {
  const stream = redactor.stream()
  return chunks.map((chunk) => stream.push(chunk)).join("") + stream.end()
}

// xorshift32: the same cases on every run, so a failure can be replayed.
function random(seed: number): () => number {
  let state = seed
  return () => {
    state ^= state << 13
    state >>>= 0
    state ^= state >>> 17
    state ^= state << 5
    state >>>= 0
    return state / 4294967296
  }
}

describe("Redactor", () => {
  it("replaces every occurrence of every secret", () => {
    const redactor = new Redactor(["s3cret", "tok"])
    expect(redactor.redact("a s3cret, a tok and s3cret again")).toBe(`a ${mask}, a ${mask} and ${mask} again`)
  })

  it("replaces a longer secret before a shorter one it contains", () => {
    const redactor = new Redactor(["abc", "abcdef"])
    expect(redactor.redact("xabcdefx abcx")).toBe(`x${mask}x ${mask}x`)
  })

  it("ignores empty and repeated values", () => {
    const redactor = new Redactor(["", "pw", "pw"])
    expect(redactor.redact("pw")).toBe(mask)
    expect(redactor.redact("no secrets here")).toBe("no secrets here")
  })

  it("treats regex metacharacters in secrets literally", () => {
    const secret = String.raw`a.b*c+(d)?[e]{2}|f^$\g/h-i`
    const redactor = new Redactor([secret])
    expect(redactor.redact(`x${secret}x aXbbc`)).toBe(`x${mask}x aXbbc`)
    expect(streamed(redactor, [`x${secret.slice(0, 9)}`, `${secret.slice(9)}x`])).toBe(`x${mask}x`)
  })

  it("returns text unchanged and holds nothing back when there are no secrets", () => {
    const stream = new Redactor([""]).stream()
    const chunk = "any text at all"
    expect(stream.push(chunk)).toBe(chunk)
    expect(stream.end()).toBe("")
  })
})

describe("Redactor streams", () => {
  it("catch a secret split at every possible position", () => {
    const secret = "hunter2-pa55"
    const redactor = new Redactor([secret])
    const text = `before ${secret} after`
    for (let cut = 0; cut <= text.length; cut++) {
      expect(streamed(redactor, [text.slice(0, cut), text.slice(cut)])).toBe(`before ${mask} after`)
    }
  })

  it("catch a secret split over three chunks at every pair of positions", () => {
    const redactor = new Redactor(["abc", "abcdef", "cdefgh"])
    const text = "zabcdefghzabcdzcdefghz"
    const expected = redactor.redact(text)
    expect(expected).toBe(`z${mask}ghz${mask}dz${mask}z`)
    for (let first = 0; first <= text.length; first++) {
      for (let second = first; second <= text.length; second++) {
        expect(streamed(redactor, [text.slice(0, first), text.slice(first, second), text.slice(second)])).toBe(expected)
      }
    }
  })

  it("prefer the longer of overlapping secrets across chunk boundaries", () => {
    const redactor = new Redactor(["abc", "abcdef"])
    expect(streamed(redactor, ["xab", "c", "de", "fx"])).toBe(`x${mask}x`)
    expect(streamed(redactor, ["xab", "c", "de", "x"])).toBe(`x${mask}dex`)
  })

  it("hold back only a tail that could still begin a secret", () => {
    const stream = new Redactor(["hunter2", "pw"]).stream()
    expect(stream.push("log line hu")).toBe("log line ")
    expect(stream.push("nt")).toBe("")
    expect(stream.push("ed down")).toBe("hunted down")
    expect(stream.push("tail p")).toBe("tail ")
    expect(stream.end()).toBe("p")
  })

  it("flush a secret at the very end with end()", () => {
    const stream = new Redactor(["abc", "abcdef"]).stream()
    expect(stream.push("done: abc")).toBe("done: ")
    expect(stream.end()).toBe(mask)
  })

  it("redact a text fed one character at a time", () => {
    const redactor = new Redactor(["token-123", "token", "123"])
    const text = "token-123 token-12 token 123 token-123token-1234"
    expect(streamed(redactor, [...text])).toBe(redactor.redact(text))
    expect(streamed(redactor, [...text])).not.toContain("token")
  })

  it("match redacting the whole text for random secrets and random cuts", () => {
    const next = random(0x9e3779b9)
    const word = (length: number) => Array.from({ length }, () => "abc"[Math.floor(next() * 3)]).join("")
    for (let round = 0; round < 2000; round++) {
      const secrets = Array.from({ length: 1 + Math.floor(next() * 4) }, () => word(1 + Math.floor(next() * 6)))
      const redactor = new Redactor(secrets)
      const text = word(Math.floor(next() * 40))
      const chunks: string[] = []
      for (let at = 0; at < text.length; ) {
        const length = Math.floor(next() * 8)
        chunks.push(text.slice(at, at + length))
        at += length
      }
      expect({ secrets, chunks, out: streamed(redactor, chunks) }).toEqual({
        secrets,
        chunks,
        out: redactor.redact(text),
      })
    }
  })

  it("masks the secret of every 64 KiB chunk and passes on a secret's beginning held back at a chunk's end", () => {
    const secrets = ["hunter2-password", "AKIAIOSFODNN7EXAMPLE", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"]
    const stream = new Redactor(secrets).stream()
    let text = ""
    while (text.length < 64 * 1024) text += "2024-01-01T00:00:00Z info compiling src/app/handler.ts took 12ms\n"
    const chunk = `${text.slice(0, 30_000)}${secrets[0]}${text.slice(30_000, 64 * 1024 - 40)}ghp_abcdefghijklmnopqr`
    const out = Array.from({ length: 20 }, () => stream.push(chunk)).join("") + stream.end()
    expect(out).toBe(chunk.replace(secrets[0] ?? "", mask).repeat(20))
  })

  it("mask what a scan position by position masks, wherever a secret's rarest character is", () => {
    // The redactor looks for each secret from its rarest character (here "Q" or "-"); a scan is the rule itself.
    const scan = (secrets: readonly string[], text: string) => {
      const longestFirst = [...secrets].sort((a, b) => b.length - a.length)
      let out = ""
      for (let at = 0; at < text.length; ) {
        const found = longestFirst.find((secret) => text.startsWith(secret, at))
        out += found === undefined ? text.charAt(at) : mask
        at += found?.length ?? 1
      }
      return out
    }
    const next = random(0x6d2b79f5)
    const word = (length: number) => Array.from({ length }, () => "aaQ-"[Math.floor(next() * 4)]).join("")
    for (let round = 0; round < 2000; round++) {
      const secrets = Array.from({ length: 1 + Math.floor(next() * 3) }, () => word(1 + Math.floor(next() * 7)))
      const text = word(Math.floor(next() * 40))
      expect({ secrets, text, out: new Redactor(secrets).redact(text) }).toEqual({
        secrets,
        text,
        out: scan(secrets, text),
      })
    }
  })
})

describe("Redactor with encoded secrets", () => {
  // Bytes chosen so that its base64 has "+" and "/" (and the URL-safe form "-" and "_"), with a quote, a backslash and non-ASCII.
  const secret = 'tok>>>?~~~"q\\ü-8f3a'
  const redactor = new Redactor([secret])
  /** What is left of `encoded` once redacted, masks removed: at most the few characters shared with its neighbours. */
  const leftover = (encoded: string) => {
    const out = redactor.redact(`[${encoded}]`)
    expect(out).toContain(mask)
    return out.replaceAll(mask, "").slice(1, -1)
  }
  const b64 = (text: string | Buffer) => Buffer.from(text).toString("base64")

  it("masks base64 at every alignment inside a longer encoded text, standard and URL-safe", () => {
    expect(b64(secret)).toMatch(/[+/]/)
    for (const before of ["", "u", "us", "use", "user:"]) {
      for (const after of ["", "x", "xy", "xyz"]) {
        const standard = b64(`${before}${secret}${after}`)
        const urlSafe = Buffer.from(`${before}${secret}${after}`).toString("base64url")
        // What stays is the encoding of the bytes around the secret: at most 2 characters before and 3 after, with "=".
        expect(leftover(standard).replace(/=+$/, "").length, standard).toBeLessThanOrEqual(
          Math.ceil((before.length * 4) / 3) + 1 + Math.ceil((after.length * 4) / 3) + 1,
        )
        expect(leftover(urlSafe)).not.toContain(urlSafe.slice(4, -4))
      }
    }
    // docker's config.json `auth`, and curl -v's Basic header
    expect(redactor.redact(`"auth": "${b64(`bot:${secret}`)}"`)).toMatch(
      /^"auth": "[A-Za-z0-9+/]{0,6}\*\*\*REDACTED\*\*\*[A-Za-z0-9+/]{0,3}=*"$/,
    )
  })

  it("masks percent-encoding, form encoding, hex and JSON escapes", () => {
    const spaced = "my secret/value ü"
    const both = new Redactor([secret, spaced])
    for (const encoded of [
      encodeURIComponent(secret),
      // lower-case %xx; the value has no upper-case letters of its own
      encodeURIComponent(secret).toLowerCase(),
      new URLSearchParams({ t: spaced }).toString().slice(2),
      Buffer.from(secret).toString("hex"),
      Buffer.from(secret).toString("hex").toUpperCase(),
      JSON.stringify(secret).slice(1, -1),
      JSON.stringify(spaced).replaceAll("/", "\\/").slice(1, -1),
      String.raw`tok>>>?~~~\"q\\\u00fc-8f3a`,
    ]) {
      expect(both.redact(`a=${encoded};`), encoded).toBe(`a=${mask};`)
    }
    expect(both.redact(`https://x.test/?token=${encodeURIComponent(secret)}&b=1`)).toBe(
      `https://x.test/?token=${mask}&b=1`,
    )
  })

  it("masks values under 8 characters only as they are", () => {
    const short = new Redactor(["pa55wd7"])
    expect(short.redact("pa55wd7")).toBe(mask)
    for (const encoded of [b64("pa55wd7"), Buffer.from("pa55wd7").toString("hex")]) {
      expect(short.redact(encoded)).toBe(encoded)
    }
    expect(new Redactor(["pa55wd78"]).redact(Buffer.from("pa55wd78").toString("hex"))).toBe(mask)
  })

  it("masks encoded forms split across chunks at every position", () => {
    for (const encoded of [b64(`user:${secret}`), Buffer.from(secret).toString("hex"), encodeURIComponent(secret)]) {
      const text = `before ${encoded} after`
      const whole = redactor.redact(text)
      expect(whole).toContain(mask)
      for (let cut = 0; cut <= text.length; cut++) {
        expect(streamed(redactor, [text.slice(0, cut), text.slice(cut)])).toBe(whole)
      }
    }
  })

  it("masks the longer of two secrets first in encoded form too", () => {
    const two = new Redactor(["password-one", "password-one-two"])
    const hex = Buffer.from("password-one-two").toString("hex")
    expect(two.redact(hex)).toBe(mask)
    expect(streamed(two, [hex.slice(0, 5), hex.slice(5, 25), hex.slice(25)])).toBe(mask)
  })

  it("masks base64 of random secrets inside random bytes", () => {
    const next = random(0x2545f491)
    const bytes = (length: number) => Buffer.from(Array.from({ length }, () => Math.floor(next() * 256)))
    for (let round = 0; round < 300; round++) {
      const value = bytes(8 + Math.floor(next() * 24)).toString("latin1")
      const encoded = Buffer.concat([bytes(Math.floor(next() * 6)), Buffer.from(value), bytes(Math.floor(next() * 6))])
      const out = new Redactor([value]).redact(encoded.toString("base64"))
      expect(out, JSON.stringify(value)).toContain(mask)
    }
  })
})
