// Evaluations per second of a typical 3-clause RBAC rule after compilation
// (target: over 1M/s). Usage: node bench/cel.ts -> prints one line.
import { compileExpression, type RbacVariables } from "../lib/cel/expression.ts"

const rule = '"deploy-team" in Groups && Email.endsWith("@corp.example") && Provider == "github"'
const users: RbacVariables[] = [
  {
    Email: "alice@corp.example",
    Name: "Alice",
    NickName: "alice",
    Provider: "github",
    UserID: "1",
    Organizations: ["corp"],
    Groups: ["readers", "deploy-team"],
  },
  {
    Email: "bob@else.example",
    Name: "Bob",
    NickName: "bob",
    Provider: "gitlab",
    UserID: "2",
    Organizations: [],
    Groups: ["deploy-team"],
  },
]

/** Evaluations per second, best of a few one-second rounds after warm-up. */
export async function benchCel(rounds = 3): Promise<number> {
  const expression = compileExpression("rbac", rule)
  let allowed = 0
  const run = (count: number) => {
    for (let n = 0; n < count; n++) if (expression.evaluate(users[n & 1] as RbacVariables)) allowed++
  }
  run(200_000)
  let best = 0
  for (let round = 0; round < rounds; round++) {
    const count = 1_000_000
    const started = performance.now()
    run(count)
    best = Math.max(best, count / ((performance.now() - started) / 1000))
    await new Promise((resolve) => setImmediate(resolve))
  }
  if (allowed === 0) throw new Error("the benchmark rule never allowed anyone")
  return best
}

if (import.meta.main) {
  const perSecond = await benchCel()
  console.log(`cel rbac rule: ${(perSecond / 1e6).toFixed(2)}M evaluations/s (target > 1M/s)`)
}
