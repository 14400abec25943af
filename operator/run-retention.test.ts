import { describe, expect, it } from "vitest"
import { quietLog } from "../lib/core/log.ts"
import type { GateObject, RunObject, ScheduleObject } from "../lib/kube/resources.ts"
import { RunRetention } from "./run-retention.ts"

// Which Runs retention deletes, with caches and a clock the test sets: what a Gate or a Schedule's
// starting deadline protects. The real informers, API and log store are in test/run-retention.test.ts.

const t0 = Date.parse("2026-01-01T00:00:00Z")
const iso = (ms: number) => new Date(ms).toISOString()

function run(name: string, createdMs: number, phase: string, labels: Record<string, string> = {}): RunObject {
  return {
    metadata: { name, labels, creationTimestamp: iso(createdMs) as unknown as Date },
    spec: { pipelineRef: { name: labels.pipeline ?? "p" } },
    status: { phase: phase as NonNullable<RunObject["status"]>["phase"], startedAt: iso(createdMs) },
  }
}

/** Runs one pass after `finished` changed; answers the names deleted. */
async function prune(
  runs: RunObject[],
  options: { keep?: number; gates?: GateObject[]; schedules?: ScheduleObject[]; now?: number } = {},
): Promise<string[]> {
  const deleted: string[] = []
  const retention = new RunRetention({
    keep: options.keep ?? 2,
    run: (name) => runs.find((each) => each.metadata?.name === name),
    gates: () => options.gates ?? [],
    schedule: (name) => options.schedules?.find((schedule) => schedule.metadata?.name === name),
    deleteRun: async (name) => deleted.push(name),
    now: () => options.now ?? t0 + 3_600_000,
    log: quietLog,
  })
  for (const each of runs) retention.changed(each)
  await new Promise((resolve) => setImmediate(resolve))
  return deleted.sort()
}

describe("RunRetention", () => {
  it("deletes a pipeline's finished runs beyond the newest `keep`, never an unfinished one or another pipeline's", async () => {
    const runs = [
      run("queued", t0, "queued"),
      run("old", t0 + 1_000, "success"),
      run("older-running", t0 + 1_500, "running"),
      run("mid", t0 + 2_000, "failure"),
      run("new", t0 + 3_000, "error"),
      run("newest", t0 + 4_000, "success"),
      run("q-old", t0, "success", { pipeline: "q" }),
    ]
    expect(await prune(runs)).toEqual(["mid", "old"])
    expect(await prune(runs, { keep: 0 })).toEqual([])
  })

  it("keeps a run a pending Gate names, not one whose Gate was decided", async () => {
    const gate = (name: string, runName: string, phase?: "approved"): GateObject => ({
      metadata: { name },
      spec: { runRef: { name: runName }, name: "g" },
      ...(phase === undefined ? {} : { status: { phase } }),
    })
    const runs = [run("a", t0, "success"), run("b", t0 + 1_000, "success"), run("c", t0 + 2_000, "success")]
    expect(await prune(runs, { keep: 1, gates: [gate("a-gate-1", "a"), gate("b-gate-1", "b", "approved")] })).toEqual([
      "b",
    ])
  })

  it("keeps a schedule tick's run within its Schedule's starting deadline, so the tick cannot fire again", async () => {
    const labels = { "runnel.dev/schedule": "p-nightly" }
    const runs = [
      run("p-nightly-1", t0, "success", labels),
      run("p-nightly-2", t0 + 200_000, "success", labels),
      run("p-nightly-3", t0 + 400_000, "success", labels),
    ]
    const now = t0 + 450_000
    // The default deadline, 300 s: the tick 450 s ago may go, the one 250 s ago may not.
    expect(await prune(runs, { keep: 1, now })).toEqual(["p-nightly-1"])
    const schedule: ScheduleObject = {
      metadata: { name: "p-nightly" },
      spec: {
        pipelineRef: { name: "p" },
        jobName: "j",
        type: "interval",
        expression: "1m",
        enabled: true,
        startingDeadlineSeconds: 100,
      },
    }
    expect(await prune(runs, { keep: 1, now, schedules: [schedule] })).toEqual(["p-nightly-1", "p-nightly-2"])
  })
})
