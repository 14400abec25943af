import type { Log } from "../lib/core/log.ts"

/**
 * The process's log on stderr: one JSON object per line
 * (`{"time":…,"level":"info","msg":"run.finished","run":"x"}`) for log
 * collectors, or `runnel: run.finished run="x"` when stderr is a terminal,
 * for the person reading it. Events ending in `.error` are level `error`.
 */
export function processLog(stream: NodeJS.WriteStream = process.stderr): Log {
  const pretty = stream.isTTY === true
  return (event, fields = {}) => {
    if (pretty) {
      const parts = Object.entries(fields).map(
        ([key, value]) => `${key}=${typeof value === "string" ? JSON.stringify(value) : String(value)}`,
      )
      stream.write(`runnel: ${[event, ...parts].join(" ")}\n`)
      return
    }
    const level = event.endsWith(".error") ? "error" : "info"
    stream.write(`${JSON.stringify({ time: new Date().toISOString(), level, msg: event, ...fields })}\n`)
  }
}
