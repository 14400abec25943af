import { SourceMap } from "node:module"
import { extname } from "node:path"
import { type Loader, type Message, transform } from "esbuild"
import { SystemError } from "../core/errors.ts"

/** A pipeline script turned into CommonJS for the sandbox, with the map back to the user's lines. */
export type CompiledScript = {
  readonly filename: string
  readonly code: string
  readonly sourceMap: SourceMap
}

const loaders: Record<string, Loader> = { ".js": "js", ".mjs": "js", ".cjs": "js", ".ts": "ts", ".mts": "ts" }

/** How many compiled pipelines are kept: a server runs a few pipelines many times each. */
const cacheSize = 64
/** By file name and source, which is what a pipeline generation fixes; the oldest use leaves first. */
const compiled = new Map<string, Promise<CompiledScript>>()

/**
 * Compiles TypeScript or JavaScript with esbuild's transform (no bundling: a
 * pipeline has no imports to resolve). CommonJS output lets the sandbox read
 * the exports without a module loader; errors point at the user's file.
 * The result is cached (it is immutable), so each run of a pipeline
 * generation after the first, concurrent ones included, skips esbuild's round
 * trip and the source map's parse; a failed compile is not kept.
 */
export function compileScript(source: string, filename: string): Promise<CompiledScript> {
  const key = `${filename}\0${source}`
  const cached = compiled.get(key)
  if (cached !== undefined) {
    compiled.delete(key)
    compiled.set(key, cached)
    return cached
  }
  const compiling = compile(source, filename)
  compiled.set(key, compiling)
  if (compiled.size > cacheSize) compiled.delete(compiled.keys().next().value as string)
  compiling.catch(() => {
    if (compiled.get(key) === compiling) compiled.delete(key)
  })
  return compiling
}

async function compile(source: string, filename: string): Promise<CompiledScript> {
  try {
    const result = await transform(source, {
      loader: loaders[extname(filename)] ?? "ts",
      format: "cjs",
      target: "es2024",
      // import() becomes require(), which the sandbox answers with a message that says why there are no modules.
      supported: { "dynamic-import": false },
      sourcemap: "external",
      sourcefile: filename,
      logLevel: "silent",
    })
    return { filename, code: result.code, sourceMap: new SourceMap(JSON.parse(result.map)) }
  } catch (error) {
    const messages: Message[] | undefined = (error as { errors?: Message[] }).errors
    if (messages === undefined || messages.length === 0) throw error
    throw new SystemError(messages.map((message) => describe(filename, message)).join("\n"))
  }
}

function describe(filename: string, message: Message): string {
  const where = message.location
  if (where === null) return `${filename}: ${message.text}`
  const caret = `${" ".repeat(where.column)}^`
  return `${filename}:${where.line}:${where.column + 1}: ${message.text}\n    ${where.lineText}\n    ${caret}`
}

/** Maps a position in the compiled code (1-based line and column) to the user's file, when the map knows it. */
export function originalPosition(script: CompiledScript, line: number, column: number): string | undefined {
  const entry = script.sourceMap.findEntry(line - 1, column - 1)
  if (!("originalLine" in entry)) return undefined
  return `${script.filename}:${entry.originalLine + 1}:${entry.originalColumn + 1}`
}
