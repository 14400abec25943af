import { StringDecoder } from "node:string_decoder"
import type { OutputStream } from "../core/run.ts"
import type { LogStore } from "./log-store.ts"
import type { Redactor, StreamRedactor } from "./redactor.ts"

export type TaskLogOptions = {
  readonly runId: string
  readonly path: string
  readonly store: LogStore
  readonly redactor: Redactor
  /** How many characters of each stream end() returns: the tail, since errors come last. */
  readonly keepChars: number
  /** Live output, redacted, in the order it is stored. */
  readonly onText?: (stream: OutputStream, text: string) => void
}

/** The log sink of one task: what the driver hands to, and what runtime.run's result is made of. */
export interface TaskLog {
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

class StreamLog {
  readonly #stream: OutputStream
  readonly #options: TaskLogOptions
  readonly #decoder = new StringDecoder("utf8")
  readonly #redactor: StreamRedactor
  /** The tail kept for end(): whole chunks, so keeping costs no copying per chunk. */
  readonly #kept: string[] = []
  #keptChars = 0
  #dropped = 0

  constructor(stream: OutputStream, options: TaskLogOptions) {
    this.#stream = stream
    this.#options = options
    this.#redactor = options.redactor.stream()
  }

  write(chunk: Buffer | string): void {
    this.#emit(this.#redactor.push(typeof chunk === "string" ? chunk : this.#decoder.write(chunk)))
  }

  end(): string {
    this.#emit(this.#redactor.push(this.#decoder.end()) + this.#redactor.end())
    const joined = this.#kept.join("")
    const excess = Math.max(0, joined.length - this.#options.keepChars)
    const dropped = this.#dropped + excess
    if (dropped === 0) return joined
    return `[runnel: ${dropped} earlier characters are in the task's stored output]\n${joined.slice(excess)}`
  }

  #emit(text: string): void {
    if (text === "") return
    const { runId, path, store, onText, keepChars } = this.#options
    store.append(runId, path, this.#stream, text)
    onText?.(this.#stream, text)
    this.#kept.push(text)
    this.#keptChars += text.length
    // Drop whole chunks from the front while the rest still covers keepChars.
    for (
      let first = this.#kept[0];
      first !== undefined && this.#keptChars - first.length >= keepChars;
      first = this.#kept[0]
    ) {
      this.#kept.shift()
      this.#keptChars -= first.length
      this.#dropped += first.length
    }
  }
}
