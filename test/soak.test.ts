import { expect, it } from "vitest"
import { soak } from "../bench/soak.ts"

// `npm run soak` scaled down to about 100 s: the same load, checks and table, 1,500 runs;
// half of it is warm-up, since V8's first full collection comes about a minute in. --keep-runs 100,
// so that retention deletes runs (and their output) within it, as the default 1000 does in the long soak.
it("keeps memory, descriptors and stored bytes per run flat over 1,500 runs, finishes every accepted one and leaves nothing behind", async () => {
  const { rows, problems } = await soak(
    { runs: 1_500, seconds: 100, dockerEvery: 50, rows: 20, warmUpShare: 0.5, keepRuns: 100 },
    (line) => console.log(line),
  )
  expect(problems).toEqual([])
  expect(rows.at(-1)?.finished).toBeGreaterThanOrEqual(1_500)
}, 300_000)
