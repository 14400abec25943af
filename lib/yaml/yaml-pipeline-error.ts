import { RunnelError } from "../core/errors.ts"

/**
 * One thing wrong with a YAML pipeline or task file. `path` is where, written
 * as in the YAML (`jobs[1].plan[0].task`, empty for the document as a whole);
 * `line` is 1-based, 0 when no line applies (the document is too big).
 */
export type YamlProblem = { readonly path: string; readonly line: number; readonly message: string }

/** How many problems the error message lists; `problems` holds them all. */
export const listedProblems = 10

/**
 * A YAML pipeline (or task config) that cannot run as written: status 400, and
 * every problem found, not just the first, so one round trip fixes them all.
 */
export class YamlPipelineError extends RunnelError {
  readonly problems: readonly YamlProblem[]
  /** `total` counts problems beyond those kept in `problems`, when there were too many to keep. */
  constructor(problems: readonly YamlProblem[], source?: string, total = problems.length) {
    super(400, "invalid_yaml", describeProblems(problems, source, total))
    this.name = "YamlPipelineError"
    this.problems = problems
  }
}

/** `jobs[1].plan[0].task: task "build" has neither config nor file (line 12)` */
export function formatProblem(problem: YamlProblem): string {
  const where = problem.path === "" ? "" : `${shortPath(problem.path)}: `
  const line = problem.line > 0 ? ` (line ${problem.line})` : ""
  return `${where}${problem.message}${line}`
}

/** Paths into deeply nested steps run to hundreds of characters; a message keeps both ends. */
function shortPath(path: string): string {
  return path.length <= 160 ? path : `${path.slice(0, 80)}…${path.slice(-60)}`
}

function describeProblems(problems: readonly YamlProblem[], source: string | undefined, total: number): string {
  const first = problems[0]
  if (total === 1 && first !== undefined) {
    return source === undefined ? formatProblem(first) : `${source}: ${formatProblem(first)}`
  }
  const lines = problems.slice(0, listedProblems).map((problem) => `- ${formatProblem(problem)}`)
  if (total > lines.length) lines.push(`- and ${total - lines.length} more`)
  return `${source ?? "the pipeline"} has ${total} problems:\n${lines.join("\n")}`
}

/**
 * Collects problems while a document is checked. It stops accepting new ones
 * past `limit` so that garbage input cannot build an enormous list.
 */
export class ProblemList {
  readonly #items: YamlProblem[] = []
  readonly #limit: number
  #dropped = 0
  constructor(limit = 100) {
    this.#limit = limit
  }
  add(path: string, line: number, message: string): void {
    if (this.#items.length >= this.#limit) {
      this.#dropped++
      return
    }
    this.#items.push({ path, line, message })
  }
  get empty(): boolean {
    return this.#items.length === 0
  }
  /** Throws the collected problems, ordered by line, if there are any. */
  throwIfAny(source?: string): void {
    if (this.#items.length > 0) this.fail(source)
  }
  /** Throws the collected problems, ordered by line. */
  fail(source?: string): never {
    // A stable sort keeps problems on one line in the order they were found.
    const sorted = [...this.#items].sort((a, b) => a.line - b.line)
    throw new YamlPipelineError(sorted, source, sorted.length + this.#dropped)
  }
}
