import type { OutputStream, RunResult, TaskRecord } from "../lib/core/run.ts"
import { consoleTaskPath } from "../lib/core/task-path.ts"
import type { RunObserver } from "../operator/engine/run-observer.ts"

type Sink = { write(text: string): unknown }

/** A partial line longer than this is printed anyway, so a task that never prints a newline cannot grow memory. */
const maxPendingChars = 64 * 1024

/**
 * Shows a run in a terminal: task output on stdout and stderr, each line
 * labelled with its task's name (parallel tasks interleave by whole lines),
 * the script's console output unlabelled, progress and the summary on stderr.
 */
export class TerminalObserver implements RunObserver {
  readonly #out: Sink
  readonly #err: Sink
  readonly #pending = new Map<string, string>()
  readonly #names = new Map<string, string>()

  constructor(out: Sink, err: Sink) {
    this.#out = out
    this.#err = err
  }

  taskStarted(task: TaskRecord): void {
    this.#names.set(task.path, task.name)
    if (task.path !== consoleTaskPath) this.#err.write(`▸ ${task.path} started\n`)
  }

  output(path: string, stream: OutputStream, text: string): void {
    const key = `${stream} ${path}`
    const lines = (this.#pending.get(key) ?? "") + text
    const end = lines.lastIndexOf("\n") + 1
    const complete = end === 0 && lines.length > maxPendingChars ? lines.length : end
    if (complete > 0) this.#print(path, stream, lines.slice(0, complete))
    this.#pending.set(key, lines.slice(complete))
  }

  taskFinished(task: TaskRecord): void {
    this.flush(task.path)
    if (task.path === consoleTaskPath) return
    const took = task.startedAt && task.endedAt ? ` in ${seconds(task.startedAt, task.endedAt)}` : ""
    const code = task.code === null ? "" : ` (exit ${task.code})`
    this.#err.write(`${task.status === "success" ? "✓" : "✗"} ${task.path} ${task.status}${code}${took}\n`)
  }

  runFinished(result: RunResult): void {
    const tasks = result.tasks.filter((task) => task.path !== consoleTaskPath)
    const count = (status: string) => tasks.filter((task) => task.status === status).length
    if (result.status === "error" && result.message !== null) this.#err.write(`error: ${result.message}\n`)
    const parts = [`${count("success")} succeeded`, `${count("failure")} failed`]
    for (const status of ["error", "aborted"]) if (count(status) > 0) parts.push(`${count(status)} ${status}`)
    this.#err.write(
      `${result.status} in ${seconds(result.startedAt ?? result.finishedAt, result.finishedAt)}: ${tasks.length} task${tasks.length === 1 ? "" : "s"} (${parts.join(", ")}), exit code ${result.code}\n`,
    )
  }

  /** Prints the partial last lines of one task (every task when `path` is absent), as if each ended with a newline. */
  flush(path?: string): void {
    for (const [key, rest] of this.#pending) {
      const [stream, keyPath] = [key.slice(0, key.indexOf(" ")) as OutputStream, key.slice(key.indexOf(" ") + 1)]
      if (path !== undefined && keyPath !== path) continue
      if (rest) this.#print(keyPath, stream, `${rest}\n`)
      this.#pending.delete(key)
    }
  }

  #print(path: string, stream: OutputStream, lines: string): void {
    const sink = stream === "stdout" ? this.#out : this.#err
    if (path === consoleTaskPath) {
      sink.write(lines)
      return
    }
    // A reader of a stored run (`runnel run logs`) knows only the path, whose last segment is the name.
    const label = `${this.#names.get(path) ?? path.slice(path.lastIndexOf("/") + 1)} | `
    const body = lines.endsWith("\n") ? lines.slice(0, -1) : lines
    sink.write(`${label}${body.replaceAll("\n", `\n${label}`)}\n`)
  }
}

function seconds(from: string, to: string): string {
  return `${((Date.parse(to) - Date.parse(from)) / 1000).toFixed(2)}s`
}
