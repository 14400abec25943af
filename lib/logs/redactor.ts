const redactionMask = "***REDACTED***"

/**
 * Replaces the secret values of one run with `***REDACTED***`. Where secrets
 * overlap, the leftmost match wins and, at one position, the longest secret:
 * with "abc" and "abcdef", "abcdef" becomes one mask, never "***REDACTED***def".
 */
export class Redactor {
  readonly #secrets: readonly string[]
  readonly #pattern: RegExp | undefined

  constructor(values: Iterable<string>) {
    // Longest first: a regex alternation takes the first alternative that matches at a position.
    this.#secrets = [...new Set(values)].filter((value) => value !== "").sort((a, b) => b.length - a.length)
    this.#pattern = this.#secrets.length === 0 ? undefined : new RegExp(this.#secrets.map(escapeRegExp).join("|"), "g")
  }

  redact(text: string): string {
    return this.#pattern === undefined ? text : text.replace(this.#pattern, redactionMask)
  }

  /** A redactor for text that arrives in chunks; see StreamRedactor. */
  stream(): StreamRedactor {
    return this.#pattern === undefined ? passThrough : new SecretStream(this.#secrets, this.#pattern)
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
  readonly #pattern: RegExp
  readonly #longest: number
  readonly #firstChars: ReadonlySet<string>
  #held = ""

  constructor(secrets: readonly string[], pattern: RegExp) {
    this.#secrets = secrets
    // A private copy: lastIndex is state, and redact() shares the Redactor's.
    this.#pattern = new RegExp(pattern.source, pattern.flags)
    this.#longest = secrets[0]?.length ?? 0
    this.#firstChars = new Set(secrets.map((secret) => secret.charAt(0)))
  }

  push(text: string): string {
    const buffer = this.#held + text
    const pattern = this.#pattern
    // A match that starts before `settled` is final: every secret that could start there fits in the buffer.
    const settled = buffer.length - this.#longest + 1
    let emitted = 0
    let out = ""
    pattern.lastIndex = 0
    for (let match = pattern.exec(buffer); match !== null; match = pattern.exec(buffer)) {
      if (match.index >= settled && this.#openStart(buffer, Math.max(emitted, settled)) <= match.index) break
      out += buffer.slice(emitted, match.index) + redactionMask
      emitted = pattern.lastIndex
    }
    const cut = this.#openStart(buffer, Math.max(emitted, settled))
    this.#held = buffer.slice(cut)
    return emitted === 0 && cut === buffer.length ? buffer : out + buffer.slice(emitted, cut)
  }

  end(): string {
    const rest = this.#held
    this.#held = ""
    return rest.replace(this.#pattern, redactionMask)
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

function escapeRegExp(value: string): string {
  return value.replace(/[\\^$.*+?()[\]{}|]/g, "\\$&")
}
