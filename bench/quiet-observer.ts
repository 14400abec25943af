import type { RunObserver } from "../operator/engine/run-observer.ts"

/** Benchmarks watch nothing: output goes to the log store only. */
export const quietObserver: RunObserver = {
  taskStarted() {},
  output() {},
  taskFinished() {},
  runFinished() {},
}
