// A 3-job YAML pipeline (two jobs in parallel, a third after both through passed:) against the same
// work written as a script, on Docker, in process: the wall-time ratio is the interpreter's cost.
import type { LogStore } from "../lib/logs/log-store.ts"
import { staticSecrets } from "../lib/secrets/secret-resolver.ts"
import type { Driver } from "../operator/drivers/driver.ts"
import { runScript } from "../operator/engine/engine.ts"
import { memoryVersions, runYamlPipeline } from "../operator/engine/yaml/interpret.ts"
import { median } from "./median.ts"
import type { BenchLine } from "./operator.ts"
import { quietObserver } from "./quiet-observer.ts"

const image = "{ type: registry-image, source: { repository: busybox } }"
const task = (name: string) =>
  `      - task: ${name}\n        config: { platform: linux, image_resource: ${image}, run: { path: "true" } }\n`

/** Jobs a and b (4 tasks each) in parallel, then c (2 tasks), each fetching the mock resource `go` first. */
const yaml = `resources:
  - name: go
    type: mock
jobs:
  - name: a
    plan:
      - get: go
${[1, 2, 3, 4].map((n) => task(`a${n}`)).join("")}  - name: b
    plan:
      - get: go
${[1, 2, 3, 4].map((n) => task(`b${n}`)).join("")}  - name: c
    plan:
      - get: go
        passed: [a, b]
${[1, 2].map((n) => task(`c${n}`)).join("")}`

/** The same containers as a script: a get's container, then the tasks, per job. */
const script = `const run = (name: string) => runtime.run({ name, image: "busybox", command: { path: "true" } })
const job = async (name: string, tasks: number) => {
  await run(\`\${name}-get\`)
  for (let n = 1; n <= tasks; n++) await run(\`\${name}\${n}\`)
}
export const pipeline = async () => {
  await Promise.all([job("a", 4), job("b", 4)])
  await job("c", 2)
}
`

let runs = 0

export async function runYamlBench(line: BenchLine, driver: Driver, store: LogStore, reps: number): Promise<void> {
  const deps = {
    driver,
    driverName: "docker",
    store,
    secrets: staticSecrets({}),
    observer: quietObserver,
    limits: { memoryMb: 128, timeoutMs: 600_000 },
  }
  const identity = () => ({
    runId: `bench-yaml-${process.pid}-${++runs}`,
    pipelineId: "bench",
    pipelineName: "bench",
    triggeredBy: "manual" as const,
    args: [],
  })
  const time = async (work: () => Promise<{ status: string; message: string | null }>) => {
    const started = performance.now()
    const result = await work()
    if (result.status !== "success") throw new Error(`bench run ended ${result.status}: ${result.message}`)
    return performance.now() - started
  }
  const asYaml = () =>
    time(() =>
      runYamlPipeline(
        { ...identity(), source: yaml },
        { ...deps, mockImage: "busybox", versions: memoryVersions() },
        new AbortController().signal,
      ),
    )
  const asScript = () =>
    time(() => runScript({ ...identity(), filename: "bench.ts", source: script }, deps, new AbortController().signal))
  await asYaml()
  await asScript()
  const yamlTimes: number[] = []
  const scriptTimes: number[] = []
  for (let rep = 0; rep < reps; rep++) {
    yamlTimes.push(await asYaml())
    scriptTimes.push(await asScript())
  }
  const y = median(yamlTimes)
  const s = median(scriptTimes)
  line(
    "yaml vs script",
    `${y.toFixed(0)} ms`,
    `${s.toFixed(0)} ms script`,
    `${(y / s).toFixed(3)}`,
    "≤ 1.05 (issue 20; 3 jobs, 10 tasks and 3 gets; a and b in parallel, c after both)",
  )
}
