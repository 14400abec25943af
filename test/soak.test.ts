import { expect, it } from "vitest"
import { soak } from "../bench/soak.ts"

// `npm run soak` scaled down to about a minute: the same load, checks and table, 1,200 runs.
it("keeps memory, descriptors and stored bytes per run flat over 1,200 runs, finishes every accepted one and leaves nothing behind", async () => {
  const { rows, problems } = await soak({ runs: 1_200, seconds: 60, dockerEvery: 50, rows: 8 }, (line) =>
    console.log(line),
  )
  expect(problems).toEqual([])
  expect(rows.at(-1)?.finished).toBeGreaterThanOrEqual(1_200)
}, 300_000)
