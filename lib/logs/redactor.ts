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
  readonly #secrets: Secrets | undefined

  constructor(values: Iterable<string>) {
    const forms = [...new Set([...values].flatMap(encodedForms))].filter((value) => value !== "")
    this.#secrets = forms.length === 0 ? undefined : new Secrets(forms)
  }

  redact(text: string): string {
    return this.#secrets === undefined ? text : maskAll(text, this.#secrets)
  }

  /** A redactor for text that arrives in chunks; see StreamRedactor. */
  stream(): StreamRedactor {
    return this.#secrets === undefined ? passThrough : new SecretStream(this.#secrets)
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
  readonly #secrets: Secrets
  #held = ""

  constructor(secrets: Secrets) {
    this.#secrets = secrets
  }

  push(text: string): string {
    const buffer = this.#held + text
    // A match that starts before `settled` is final: every secret that could start there fits in the buffer.
    const settled = buffer.length - this.#secrets.longest + 1
    let emitted = 0
    let out = ""
    for (const match of this.#secrets.find(buffer)) {
      if (match.index >= settled && this.#secrets.openStart(buffer, Math.max(emitted, settled)) <= match.index) break
      out += buffer.slice(emitted, match.index) + redactionMask
      emitted = match.end
    }
    const cut = this.#secrets.openStart(buffer, Math.max(emitted, settled))
    this.#held = buffer.slice(cut)
    return emitted === 0 && cut === buffer.length ? buffer : out + buffer.slice(emitted, cut)
  }

  end(): string {
    const rest = this.#held
    this.#held = ""
    return maskAll(rest, this.#secrets)
  }
}

/** `text` with every secret in it masked; `text` itself when it holds none. */
function maskAll(text: string, secrets: Secrets): string {
  let out = ""
  let emitted = 0
  for (const match of secrets.find(text)) {
    out += text.slice(emitted, match.index) + redactionMask
    emitted = match.end
  }
  return emitted === 0 ? text : out + text.slice(emitted)
}

/**
 * Roughly how common each character is in build output, most common first;
 * any character not listed counts as rarer than all of these. It only decides
 * where in a secret the search starts (see Secrets), never what is found.
 */
const commonFirst = ` \netaoinsrlcdhu0123456789.:-/TZmpfgbywvkxjqz_,=()[]"'EAIOSRNLCDHUMPFGBYWVKXJQ`

/**
 * The secrets of one run, every encoded form included, and how to find them.
 *
 * A run has a dozen or more forms per value (see encodings.ts), so the search
 * is shaped by what makes one String.indexOf fast: V8 runs memchr over the
 * text for the first character of what it looks for. Each form is therefore
 * looked for from its anchor, the character in it rarest in logs, and what
 * comes before the anchor is compared where the rest was found. A text with
 * no anchor character at all (one pass of a character class) holds no secret
 * and costs no search per form.
 */
class Secrets {
  /** Longest first, so that of the secrets found at one position the first is the one to mask. */
  readonly #forms: readonly Needle[]
  readonly #anyAnchor: RegExp
  /** The forms by their first character, for openStart. */
  readonly #byFirstChar: ReadonlyMap<string, readonly string[]>
  readonly longest: number

  constructor(forms: readonly string[]) {
    const sorted = [...forms].sort((a, b) => b.length - a.length)
    this.#forms = sorted.map(needle)
    const anchors = new Set(this.#forms.map(({ tail }) => tail.charCodeAt(0)))
    this.#anyAnchor = new RegExp(`[${[...anchors].map((code) => `\\u${code.toString(16).padStart(4, "0")}`).join("")}]`)
    this.#byFirstChar = Map.groupBy(sorted, (form) => form.charAt(0))
    this.longest = sorted[0]?.length ?? 0
  }

  /**
   * The secrets in `text`, left to right, none overlapping: the leftmost one,
   * and of those at one position the first of `forms` (the longest), then
   * the same from its end on. One indexOf per form rather than one regex of
   * many alternatives: V8 skips ahead by up to a form's length for each, while
   * a regex of a base64, hex and plain form of every value skips ahead little.
   */
  *find(text: string): Generator<{ index: number; end: number }> {
    if (!this.#anyAnchor.test(text)) return
    const forms = this.#forms
    const next = forms.map((form) => indexOf(text, form, 0))
    for (;;) {
      let best = -1
      for (let n = 0; n < forms.length; n++) {
        const at = next[n] ?? -1
        if (at >= 0 && (best < 0 || at < (next[best] ?? -1))) best = n
      }
      if (best < 0) return
      const index = next[best] ?? 0
      const from = index + (forms[best]?.length ?? 0)
      yield { index, end: from }
      for (let n = 0; n < forms.length; n++) {
        const form = forms[n]
        if (form !== undefined && (next[n] ?? -1) >= 0 && (next[n] ?? -1) < from) next[n] = indexOf(text, form, from)
      }
    }
  }

  /**
   * The first position at or after `from` whose rest of `text` is a proper
   * prefix of a secret: more text could still make a (longer) secret start
   * there, so nothing from that position on may be emitted yet.
   */
  openStart(text: string, from: number): number {
    for (let start = from; start < text.length; start++) {
      const candidates = this.#byFirstChar.get(text.charAt(start))
      if (candidates === undefined) continue
      const rest = text.slice(start)
      if (candidates.some((form) => form.length > rest.length && form.startsWith(rest))) return start
    }
    return text.length
  }
}

/** A form split at its anchor: `head` + `tail`, where `tail` starts with the form's rarest character. */
type Needle = { readonly head: string; readonly tail: string; readonly length: number }

function needle(form: string): Needle {
  const rarity = (at: number) => {
    const rank = commonFirst.indexOf(form.charAt(at))
    return rank < 0 ? commonFirst.length : rank
  }
  let anchor = 0
  for (let at = 1; at < form.length; at++) if (rarity(at) > rarity(anchor)) anchor = at
  return { head: form.slice(0, anchor), tail: form.slice(anchor), length: form.length }
}

/** Where `form` first starts in `text` at or after `from`, or -1. */
function indexOf(text: string, { head, tail }: Needle, from: number): number {
  for (let at = text.indexOf(tail, from + head.length); at >= 0; at = text.indexOf(tail, at + 1)) {
    if (text.startsWith(head, at - head.length)) return at - head.length
  }
  return -1
}
