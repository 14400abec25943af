// One measurement per process, so its peak RSS is this variant's alone.
// Usage: node bench/log-throughput.ts raw|runnel  -> prints one JSON line
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import Docker from "dockerode"
import { hostEnvironment } from "../lib/config/flags.ts"
import { openSqliteLogStore } from "../lib/logs/sqlite-log-store.ts"
import { staticSecrets } from "../lib/secrets/secret-resolver.ts"
import { dockerDriverFactory } from "../operator/drivers/docker/docker-driver.ts"
import { runScript } from "../operator/engine/engine.ts"
import { rawAttach } from "./docker-floor.ts"
import { quietObserver } from "./quiet-observer.ts"

const bytes = 200_000_000
// 81-byte lines, like real CI logs (FLOORS.md section 2, payload "lines").
const command = `yes ${"a".repeat(80)} | head -c ${bytes}`
// A realistic handful: a password, a cloud key pair, a forge token and a chat bot token.
const benchSecrets = {
  TOKEN: "s3cr3t-value-never-printed",
  AWS_ACCESS_KEY_ID: "AKIAIOSFODNN7EXAMPLE",
  AWS_SECRET_ACCESS_KEY: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
  GITHUB_TOKEN: "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
  SLACK_TOKEN: "xoxb-1234567890-abcdefghij",
}
const variant = process.argv[2]
const rssBeforeMiB = process.memoryUsage().rss / 2 ** 20
/** Set where the task's work begins: after what a server opens once (the log store, the driver), not per run. */
let started = performance.now()
let seconds = 0
let peakRssMiB = 0
const measured = () => {
  seconds = (performance.now() - started) / 1000
  peakRssMiB = process.resourceUsage().maxRSS / 1024
}

if (variant === "raw") {
  const got = await rawAttach(new Docker(), ["sh", "-c", command])
  measured()
  if (got !== bytes) throw new Error(`raw attach read ${got} bytes`)
} else if (variant === "runnel") {
  const dir = mkdtempSync(join(tmpdir(), "runnel-bench-"))
  const store = await openSqliteLogStore(join(dir, "runnel.db"))
  const driver = dockerDriverFactory({ host: hostEnvironment().dockerHost }).create({})
  started = performance.now()
  const result = await runScript(
    {
      runId: `bench-logs-${process.pid}`,
      pipelineId: "bench",
      pipelineName: "bench",
      filename: "logs.ts",
      // The run's secrets make the redactor do its real work on every chunk: each value in every encoded form.
      source: `export const pipeline = async () => {
        const r = await runtime.run({ name: "logs", image: "busybox", command: { path: "sh", args: ["-c", ${JSON.stringify(command)}] }, env: { T: "secret:TOKEN" } })
        assert.equal(r.code, 0)
      }`,
      triggeredBy: "manual",
      args: [],
    },
    {
      driver,
      driverName: "docker",
      store,
      secrets: staticSecrets(benchSecrets),
      observer: quietObserver,
      limits: { memoryMb: 128, timeoutMs: 600_000 },
    },
    new AbortController().signal,
  )
  measured()
  if (result.status !== "success") throw new Error(`run ended ${result.status}: ${result.message}`)
  const stored = store.output(result.runId, "tasks/1/logs", "stdout").length
  await store.close()
  await driver.close()
  rmSync(dir, { recursive: true, force: true })
  if (stored !== bytes) throw new Error(`stored ${stored} characters`)
} else {
  throw new Error("usage: node bench/log-throughput.ts raw|runnel")
}

console.log(
  JSON.stringify({ variant, mbPerS: bytes / 1e6 / seconds, peakRssMiB, rssGrowthMiB: peakRssMiB - rssBeforeMiB }),
)
