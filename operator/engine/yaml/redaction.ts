import { Redactor, type StreamRedactor } from "../../../lib/logs/redactor.ts"

/**
 * A Redactor that learns values during the run: ((variables)) resolved from
 * secrets and var sources, and load_var values (unless `reveal: true`).
 * Output already streaming keeps the redactor it started with; a value is
 * added before any task that could print it starts, which is what matters.
 */
export class GrowingRedactor extends Redactor {
  #values: Set<string>
  #current: Redactor

  constructor(values: Iterable<string>) {
    super([])
    this.#values = new Set(values)
    this.#current = new Redactor(this.#values)
  }

  /** Redacts `values` from now on; empty strings are ignored. */
  add(values: Iterable<string>): void {
    let added = false
    for (const value of values) {
      if (value === "" || this.#values.has(value)) continue
      this.#values.add(value)
      added = true
    }
    if (added) this.#current = new Redactor(this.#values)
  }

  override redact(text: string): string {
    return this.#current.redact(text)
  }

  override stream(): StreamRedactor {
    return this.#current.stream()
  }
}
