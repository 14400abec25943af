import { createHash } from "node:crypto"
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { CreateBucketCommand, S3Client } from "@aws-sdk/client-s3"
import S3rver from "s3rver"
import { afterAll, beforeAll, expect, it } from "vitest"
import { describeDocker } from "./docker.ts"
import { call, eventually, runToEnd, serverProcesses } from "./server-process.ts"

// `runnel server --secrets-s3-bucket ...` against s3rver on loopback: secrets set over the REST API and
// with --secret land in the bucket sealed, and a container task gets them in its environment, redacted.
const servers = serverProcesses("runnel-s3-secrets-test-")
const dir = mkdtempSync(join(tmpdir(), "runnel-s3rver-"))
const s3 = new S3rver({ port: 0, address: "127.0.0.1", silent: true, directory: dir })
let endpoint = ""
const bucket = "team-secrets"

beforeAll(async () => {
  endpoint = `http://127.0.0.1:${(await s3.run()).port}`
  const client = new S3Client({
    endpoint,
    region: "us-east-1",
    forcePathStyle: true,
    credentials: { accessKeyId: "S3RVER", secretAccessKey: "S3RVER" },
  })
  await client.send(new CreateBucketCommand({ Bucket: bucket }))
  client.destroy()
})
afterAll(async () => {
  servers.cleanUp()
  await s3.close()
  rmSync(dir, { recursive: true, force: true })
})

const s3Flags = (bucketName: string) => [
  "--secrets-s3-bucket",
  bucketName,
  "--secrets-s3-endpoint",
  endpoint,
  "--secrets-s3-access-key-id",
  "S3RVER",
  "--secrets-s3-secret-access-key",
  "S3RVER",
  "--secrets-s3-prefix",
  "ci",
]

const pipelineValue = "pipeline-token-4d1f8e2a"
const globalValue = "global-token-93bc07e5"
const sha = (text: string) => createHash("sha256").update(text).digest("hex")

/** Every object file s3rver keeps, as text. */
function bucketText(): string {
  const parts: string[] = []
  const walk = (path: string) => {
    for (const name of readdirSync(path)) {
      const child = join(path, name)
      if (statSync(child).isDirectory()) walk(child)
      else parts.push(`${child}\n${readFileSync(child).toString("latin1")}`)
    }
  }
  walk(join(dir, bucket))
  return parts.join("\n")
}

describeDocker("secrets in an S3 bucket", () => {
  it("resolve a pipeline and a global secret into a container task, redacted, sealed in the bucket", async () => {
    const server = await servers.start([
      ...s3Flags(bucket),
      "--secrets-s3-passphrase",
      "correct horse battery",
      "--secrets-s3-encrypt",
      "sse-s3",
      "--driver",
      "docker",
      "--secret",
      `GLOBAL_TOKEN=${globalValue}`,
    ])
    // The task proves it got the values (their hashes) and prints them, which the redactor masks.
    const content = `export const pipeline = async () => {
  await runtime.run({
    name: "show",
    image: "busybox",
    command: { path: "sh", args: ["-c", "test -f /.dockerenv && echo in a container; echo own=$OWN global=$GLOBAL; printf %s \\"$OWN\\" | sha256sum; printf %s \\"$GLOBAL\\" | sha256sum"] },
    env: { OWN: "secret:OWN_TOKEN", GLOBAL: "secret:GLOBAL_TOKEN" },
  })
}
`
    const put = await call(server.url, "PUT", "/api/pipelines/s3-secrets", {
      content,
      secrets: { OWN_TOKEN: pipelineValue },
    })
    expect(put.status).toBe(201)
    expect((await call(server.url, "GET", "/api/pipelines/s3-secrets/secrets")).body).toEqual({ keys: ["OWN_TOKEN"] })

    const { run, tasks } = await runToEnd(server.url, "s3-secrets", 120_000)
    expect(run.status).toBe("success")
    expect(tasks[0].stdout).toBe(
      `in a container\nown=***REDACTED*** global=***REDACTED***\n${sha(pipelineValue)}  -\n${sha(globalValue)}  -\n`,
    )

    const objects = bucketText()
    expect(objects).toContain(`ci/pipeline/${put.body.id}/OWN_TOKEN`)
    expect(objects).toContain("ci/global/GLOBAL_TOKEN")
    for (const value of [pipelineValue, globalValue]) expect(objects).not.toContain(value)
    expect(server.stderr()).not.toMatch(/WARNING: secrets in bucket/)

    // The pipeline's delete removes its objects.
    expect((await call(server.url, "DELETE", "/api/pipelines/s3-secrets")).status).toBe(204)
    await eventually(
      async () => bucketText(),
      (text) => !text.includes(`ci/pipeline/${put.body.id}/OWN_TOKEN._S3rver_object`),
      "the pipeline's secret objects are deleted",
    )
  }, 180_000)

  it("fail a run naming the key and saying the passphrase changed, when the next start has another", async () => {
    const flags = [...s3Flags(bucket), "--secrets-s3-prefix", "rotated"]
    const first = await servers.start([
      ...flags,
      "--secrets-s3-passphrase",
      "first one",
      "--secret",
      "G_TOKEN=g-value-1",
    ])
    first.child.kill("SIGKILL")
    const second = await servers.start([...flags, "--secrets-s3-passphrase", "second one"])
    const content = `export const pipeline = async () => {
  await runtime.run({ name: "use", image: "busybox", command: { path: "true" }, env: { G: "secret:G_TOKEN" } })
}
`
    expect((await call(second.url, "PUT", "/api/pipelines/rotated", { content })).status).toBe(201)
    const { run } = await runToEnd(second.url, "rotated")
    expect(run.status).toBe("error")
    expect(run.error_message).toMatch(
      /secret "G_TOKEN" in scope "global" cannot be decrypted: the passphrase changed since it was stored/,
    )
    expect(run.error_message).not.toContain("g-value-1")
  }, 60_000)

  it("warn at start without a passphrase, and refuse to start on a bucket that does not exist", async () => {
    const plain = await servers.start([...s3Flags(bucket), "--secrets-s3-encrypt", "sse-provider"])
    expect(plain.stderr()).toMatch(
      /WARNING: secrets in bucket "team-secrets" are stored without --secrets-s3-passphrase: their values rest only under the provider's encryption \(sse-s3\)/,
    )
    await expect(servers.start(s3Flags("no-such-bucket"))).rejects.toThrow(
      /the secrets bucket "no-such-bucket" cannot be used: NoSuchBucket/,
    )
    await expect(servers.start([...s3Flags(bucket), "--secrets-s3-encrypt", "sse-x"])).rejects.toThrow(
      /--secrets-s3-encrypt "sse-x" is not known: use sse-s3, sse-kms, sse-c/,
    )
  }, 60_000)
})
