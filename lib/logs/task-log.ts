import { StringDecoder } from "node:string_decoder"
import type { OutputStream } from "../core/run.ts"
import type { LogStore } from "./log-store.ts"
import type { Redactor, StreamRedactor } from "./redactor.ts"

export type TaskLogOptions = {
  readonly runId: string
  readonly path: string
  readonly store: LogStore
  readonly redactor: Redactor
  /** At most how many characters of each stream end() returns: the tail, since errors come last. */
  readonly keepChars: number
  /** Live output, redacted, in the order it is stored. */
  readonly onText?: (stream: OutputStream, text: string) => void
}

/** The log sink of one task: what the driver writes to, and what runtime.run's result is made of. */
export interface TaskLog {
  /** Raw bytes from the driver (a character may be split between chunks), or text already decoded. */
  stdout(chunk: Buffer | string): void
  stderr(chunk: Buffer | string): void
  /** Flushes what decoders and redactors hold back and returns the kept tail of each stream. */
  end(): { stdout: string; stderr: string }
}

/**
 * Decodes UTF-8 across chunk boundaries, redacts across chunk boundaries, then
 * stores and publishes the redacted text. Nothing unredacted leaves here, and
 * memory is bounded by keepChars whatever the task prints.
 */
export function taskLog(options: TaskLogOptions): TaskLog {
  const stdout = new StreamLog("stdout", options)
  const stderr = new StreamLog("stderr", options)
  return {
    stdout: (chunk) => stdout.write(chunk),
    stderr: (chunk) => stderr.write(chunk),
    end: () => ({ stdout: stdout.end(), stderr: stderr.end() }),
  }
}

/** A kept tail that starts with a line saying how much came before it. */
export function withDroppedNote(dropped: number, tail: string): string {
  return `[runnel: ${dropped} earlier characters are in the task's stored output]\n${tail}`
}

class StreamLog {
  readonly #stream: OutputStream
  readonly #options: TaskLogOptions
  readonly #decoder = new StringDecoder("utf8")
  readonly #redactor: StreamRedactor
  readonly #tail: Tail

  constructor(stream: OutputStream, options: TaskLogOptions) {
    this.#stream = stream
    this.#options = options
    this.#redactor = options.redactor.stream()
    this.#tail = new Tail(options.keepChars)
  }

  write(chunk: Buffer | string): void {
    this.#emit(this.#redactor.push(typeof chunk === "string" ? chunk : this.#decoder.write(chunk)))
  }

  end(): string {
    this.#emit(this.#redactor.push(this.#decoder.end()) + this.#redactor.end())
    return this.#tail.text()
  }

  #emit(text: string): void {
    if (text === "") return
    const { runId, path, store, onText } = this.#options
    store.append(runId, path, this.#stream, text)
    onText?.(this.#stream, text)
    this.#tail.add(text)
  }
}

const encoder = new TextEncoder()
/** Text is encoded in pieces of this many UTF-16 units, into one scratch buffer big enough for any piece. */
const pieceUnits = 16 << 10
const scratch = Buffer.allocUnsafe(3 * pieceUnits)
const firstRingBytes = 64 << 10

/**
 * The end of one stream for runtime.run's result: its last `capacity` bytes
 * of UTF-8 (so at most `capacity` characters), in one buffer outside the JS
 * heap. Keeping the last chunks as strings instead keeps each alive long
 * enough for V8 to promote it to the old generation, which then grows until
 * the collector gets to it: up to ≈190 MiB of RSS for a stream at pipe speed
 * in our measurements. One buffer costs the same whatever the collector does.
 */
class Tail {
  readonly #capacity: number
  #ring = Buffer.alloc(0)
  /** Where the next byte goes; once the ring is full, the oldest byte is there too. */
  #end = 0
  #full = false
  /** UTF-16 units seen, kept or not. */
  #units = 0

  constructor(capacity: number) {
    this.#capacity = Math.max(0, Math.floor(capacity))
  }

  add(text: string): void {
    this.#units += text.length
    if (this.#capacity === 0) return
    // Every unit takes at least one byte, so only the last `capacity` units can be kept.
    let at = Math.max(0, text.length - this.#capacity)
    if (at > 0 && isLowSurrogate(text.charCodeAt(at))) at++
    while (at < text.length) {
      let to = Math.min(text.length, at + pieceUnits)
      // A piece that ended between the halves of a surrogate pair would encode both as U+FFFD.
      if (to < text.length && isLowSurrogate(text.charCodeAt(to))) to--
      const { written } = encoder.encodeInto(text.slice(at, to), scratch)
      this.#push(written)
      at = to
    }
  }

  /** Copies `length` bytes of scratch into the ring, over its oldest bytes once it is full. */
  #push(length: number): void {
    if (!this.#full && this.#end + length > this.#ring.length && this.#ring.length < this.#capacity) {
      const size = Math.min(this.#capacity, Math.max(2 * this.#ring.length, this.#end + length, firstRingBytes))
      const ring = Buffer.allocUnsafe(size)
      this.#ring.copy(ring, 0, 0, this.#end)
      this.#ring = ring
    }
    const ring = this.#ring
    const start = Math.max(0, length - ring.length)
    const first = Math.min(length - start, ring.length - this.#end)
    scratch.copy(ring, this.#end, start, start + first)
    scratch.copy(ring, 0, start + first, length)
    const end = this.#end + (length - start)
    this.#full ||= end >= ring.length
    this.#end = end % ring.length
  }

  /** The kept text, after a line that says how much came before it when some did. */
  text(): string {
    const ring = this.#ring
    const bytes = this.#full ? Buffer.concat([ring.subarray(this.#end), ring.subarray(0, this.#end)]) : ring
    let start = 0
    const length = this.#full ? bytes.length : this.#end
    // The oldest character may have lost its first bytes to a newer one.
    while (start < length && ((bytes[start] ?? 0) & 0xc0) === 0x80) start++
    const kept = bytes.toString("utf8", start, length)
    const dropped = this.#units - kept.length
    if (dropped === 0) return kept
    return `[runnel: ${dropped} earlier characters are in the task's stored output]\n${kept}`
  }
}

function isLowSurrogate(code: number): boolean {
  return code >= 0xdc00 && code <= 0xdfff
}
