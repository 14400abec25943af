/**
 * How runnel reports what it does: a dotted `area.event` name and fields
 * (`run.finished {run: "build-x7k2", phase: "success"}`). The CLI writes them
 * as JSON lines, or pretty on a terminal; tests and benchmarks pass a
 * function that keeps quiet.
 */
export type Log = (event: string, fields?: Readonly<Record<string, unknown>>) => void

export const quietLog: Log = () => {}
