import { encodedForms } from "./encodings.ts"

const redactionMask = "***REDACTED***"

/**
 * Replaces the secret values of one run with `***REDACTED***`. Where secrets
 * overlap, the leftmost match wins and, at one position, the longest secret:
 * with "abc" and "abcdef", "abcdef" becomes one mask, never "***REDACTED***def".
 * Each value is masked also in its encoded forms (see encodings.ts): base64,
 * percent-encoding, hex and JSON escaping, all by the same rules.
 */
export class Redactor {
  /** Longest first, so that of the secrets found at one position the first is the one to mask. */
  readonly #secrets: readonly string[]

  constructor(values: Iterable<string>) {
    this.#secrets = [...new Set([...values].flatMap(encodedForms))]
      .filter((value) => value !== "")
      .sort((a, b) => b.length - a.length)
  }

  redact(text: string): string {
    return maskAll(text, this.#secrets)
  }

  /** A redactor for text that arrives in chunks; see StreamRedactor. */
  stream(): StreamRedactor {
    return this.#secrets.length === 0 ? passThrough : new SecretStream(this.#secrets)
  }
}

/**
 * Redacts a text that arrives in chunks. What push() and end() return, joined,
 * is exactly redact() of the chunks joined, wherever the chunks were cut.
 */
export interface StreamRedactor {
  /** Returns the redacted text that is safe to emit now; holds back at most a tail that could begin a secret. */
  push(text: string): string
  /** Returns the held-back tail, redacted. */
  end(): string
}

const passThrough: StreamRedactor = { push: (text) => text, end: () => "" }

class SecretStream implements StreamRedactor {
  readonly #secrets: readonly string[]
  readonly #longest: number
  readonly #firstChars: ReadonlySet<string>
  #held = ""

  constructor(secrets: readonly string[]) {
    this.#secrets = secrets
    this.#longest = secrets[0]?.length ?? 0
    this.#firstChars = new Set(secrets.map((secret) => secret.charAt(0)))
  }

  push(text: string): string {
    const buffer = this.#held + text
    // A match that starts before `settled` is final: every secret that could start there fits in the buffer.
    const settled = buffer.length - this.#longest + 1
    let emitted = 0
    let out = ""
    for (const match of findSecrets(buffer, this.#secrets)) {
      if (match.index >= settled && this.#openStart(buffer, Math.max(emitted, settled)) <= match.index) break
      out += buffer.slice(emitted, match.index) + redactionMask
      emitted = match.end
    }
    const cut = this.#openStart(buffer, Math.max(emitted, settled))
    this.#held = buffer.slice(cut)
    return emitted === 0 && cut === buffer.length ? buffer : out + buffer.slice(emitted, cut)
  }

  end(): string {
    const rest = this.#held
    this.#held = ""
    return maskAll(rest, this.#secrets)
  }

  /**
   * The first position at or after `from` whose rest of the buffer is a proper
   * prefix of a secret: more text could still make a (longer) secret start
   * there, so nothing from that position on may be emitted yet.
   */
  #openStart(buffer: string, from: number): number {
    for (let start = from; start < buffer.length; start++) {
      if (!this.#firstChars.has(buffer.charAt(start))) continue
      const rest = buffer.slice(start)
      if (this.#secrets.some((secret) => secret.length > rest.length && secret.startsWith(rest))) return start
    }
    return buffer.length
  }
}

/** `text` with every secret in it masked; `text` itself when it holds none. */
function maskAll(text: string, secrets: readonly string[]): string {
  let out = ""
  let emitted = 0
  for (const match of findSecrets(text, secrets)) {
    out += text.slice(emitted, match.index) + redactionMask
    emitted = match.end
  }
  return emitted === 0 ? text : out + text.slice(emitted)
}

/**
 * The secrets in `text`, left to right, none overlapping: the leftmost one,
 * and of those at one position the first of `secrets` (the longest), then
 * the same from its end on. One indexOf per secret rather than one regex of
 * many alternatives: V8 skips ahead by up to a secret's length for each, while
 * a regex of a base64, hex and plain form of every value skips ahead little.
 */
function* findSecrets(text: string, secrets: readonly string[]): Generator<{ index: number; end: number }> {
  const next = secrets.map((secret) => text.indexOf(secret))
  let from = 0
  for (;;) {
    let best = -1
    for (let n = 0; n < secrets.length; n++) {
      const at = next[n] ?? -1
      if (at >= 0 && (best < 0 || at < (next[best] ?? -1))) best = n
    }
    if (best < 0) return
    const index = next[best] ?? 0
    from = index + (secrets[best]?.length ?? 0)
    yield { index, end: from }
    for (let n = 0; n < secrets.length; n++) {
      if ((next[n] ?? -1) >= 0 && (next[n] ?? -1) < from) next[n] = text.indexOf(secrets[n] ?? "", from)
    }
  }
}
