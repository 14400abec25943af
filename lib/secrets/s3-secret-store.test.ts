import { createHash, randomBytes } from "node:crypto"
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs"
import { createServer, type IncomingHttpHeaders, request, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { CreateBucketCommand, PutObjectCommand, S3Client } from "@aws-sdk/client-s3"
import S3rver from "s3rver"
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest"
import { openS3SecretStore, type S3SecretStoreOptions } from "./s3-secret-store.ts"
import { globalScope, pipelineScope, type SecretStore } from "./secret-store.ts"
import { secretStoreContract } from "./secret-store-contract.fixture.ts"

// The S3 backend against s3rver, an S3-protocol server on loopback that keeps objects as files.
const dir = mkdtempSync(join(tmpdir(), "runnel-s3-secrets-"))
const s3 = new S3rver({ port: 0, address: "127.0.0.1", silent: true, directory: join(dir, "s3") })
let endpoint = ""
const bucket = "runnel-secrets"
const credentials = { accessKeyId: "S3RVER", secretAccessKey: "S3RVER" }

beforeAll(async () => {
  const address = await s3.run()
  endpoint = `http://127.0.0.1:${address.port}`
  const client = new S3Client({ endpoint, region: "us-east-1", forcePathStyle: true, credentials })
  await client.send(new CreateBucketCommand({ Bucket: bucket }))
  client.destroy()
})
afterAll(async () => {
  await s3.close()
  rmSync(dir, { recursive: true, force: true })
})

let stores = 0
/** A store under a prefix of its own: an empty backend for each test. */
async function open(options: Partial<S3SecretStoreOptions> = {}): Promise<SecretStore> {
  const store = await openS3SecretStore({
    bucket,
    endpoint,
    credentials,
    prefix: `test-${++stores}`,
    ...options,
  })
  onTestFinished(() => store.close())
  return store
}

// s3rver keeps an object as a file named by its key: 255 bytes at most, less "._S3rver_object".
const s3rverKeyChars = { longestKeyStored: 200 }
secretStoreContract(
  "S3 (passphrase)",
  () =>
    openS3SecretStore({ bucket, endpoint, credentials, prefix: `contract-${++stores}`, passphrase: "correct horse" }),
  s3rverKeyChars,
)
secretStoreContract(
  "S3 (no passphrase, sse-s3)",
  () =>
    openS3SecretStore({
      bucket,
      endpoint,
      credentials,
      prefix: `contract-${++stores}`,
      encryption: { mode: "sse-s3" },
    }),
  s3rverKeyChars,
)

/** Every file s3rver keeps for the bucket, bodies and metadata, as text. */
function bucketFiles(prefix: string): { path: string; text: string }[] {
  const files: { path: string; text: string }[] = []
  const walk = (path: string) => {
    for (const name of readdirSync(path)) {
      const child = join(path, name)
      if (statSync(child).isDirectory()) walk(child)
      else files.push({ path: child, text: readFileSync(child).toString("latin1") })
    }
  }
  walk(join(dir, "s3", bucket, prefix))
  return files
}

const pipeline = pipelineScope("0b9c7c9e-5a55-4c8e-9d59-1f1f2c3a4b5c")

describe("S3 secret store objects", () => {
  it("keeps one object per secret under <prefix>/<scope>/<key>, removed with the scope", async () => {
    const store = await open({ prefix: "layout/team-a" })
    await store.set(globalScope, { TOKEN: "global-value-1" })
    await store.set(pipeline, { TOKEN: "pipeline-value-1", OTHER: "other-value-1" })
    const paths = bucketFiles("layout")
      .map((file) => file.path.slice(join(dir, "s3", bucket).length + 1))
      .filter((path) => path.endsWith("._S3rver_object"))
      .sort()
    expect(paths).toEqual([
      "layout/team-a/global/TOKEN._S3rver_object",
      "layout/team-a/pipeline/0b9c7c9e-5a55-4c8e-9d59-1f1f2c3a4b5c/OTHER._S3rver_object",
      "layout/team-a/pipeline/0b9c7c9e-5a55-4c8e-9d59-1f1f2c3a4b5c/TOKEN._S3rver_object",
    ])
    expect(await store.deleteScope(pipeline)).toBe(2)
    expect(bucketFiles("layout").filter((file) => file.path.endsWith("._S3rver_object"))).toHaveLength(1)
  })

  it("never stores a plaintext value when a passphrase is set", async () => {
    const value = "plaintext-canary-7c1e9a"
    const store = await open({ prefix: "sealed", passphrase: "correct horse" })
    await store.set(globalScope, { CANARY: value })
    await store.set(pipeline, { CANARY: value })
    const files = bucketFiles("sealed")
    expect(files.length).toBeGreaterThanOrEqual(2)
    for (const file of files) {
      expect(file.text, file.path).not.toContain(value)
      expect(file.text, file.path).not.toContain(Buffer.from(value).toString("base64"))
    }
    expect(await store.get(pipeline, "CANARY")).toBe(value)
  })

  it("fails naming the key and saying the passphrase changed, when it did", async () => {
    const first = await open({ prefix: "rotated", passphrase: "first passphrase" })
    await first.set(globalScope, { TOKEN: "value-1" })
    const second = await open({ prefix: "rotated", passphrase: "second passphrase" })
    await expect(second.get(globalScope, "TOKEN")).rejects.toThrow(
      /secret "TOKEN" in scope "global" cannot be decrypted: the passphrase changed since it was stored/,
    )
    await expect(second.values(globalScope)).rejects.toThrow(/the passphrase changed/)
    const none = await open({ prefix: "rotated" })
    await expect(none.get(globalScope, "TOKEN")).rejects.toThrow(
      /stored encrypted with a passphrase and none was given/,
    )
    expect(await first.get(globalScope, "TOKEN")).toBe("value-1")
  })

  it("fails with the same clear error for an object edited in the bucket", async () => {
    const store = await open({ prefix: "edited", passphrase: "correct horse" })
    await store.set(globalScope, { TOKEN: "value-1" })
    const client = new S3Client({ endpoint, region: "us-east-1", forcePathStyle: true, credentials })
    onTestFinished(() => client.destroy())
    const forged = Buffer.concat([randomBytes(12), Buffer.from("value-2"), randomBytes(16)])
    await client.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: "edited/global/TOKEN",
        Body: forged,
        Metadata: { "runnel-sealed": "aes-256-gcm-v1" },
      }),
    )
    await expect(store.get(globalScope, "TOKEN")).rejects.toThrow(
      /secret "TOKEN" in scope "global" cannot be decrypted: .*or its object was edited in the bucket/,
    )
    // A plain object put in place of a sealed one is refused too: it could be anyone's.
    await client.send(new PutObjectCommand({ Bucket: bucket, Key: "edited/global/TOKEN", Body: "value-3" }))
    await expect(store.get(globalScope, "TOKEN")).rejects.toThrow(/stored without the passphrase's encryption/)
  })

  it("refuses at open a bucket that does not exist and refused credentials, naming the bucket and the S3 code", async () => {
    await expect(openS3SecretStore({ bucket: "no-such-bucket", endpoint, credentials })).rejects.toThrow(
      'the secrets bucket "no-such-bucket" cannot be used: NoSuchBucket',
    )
    await expect(
      openS3SecretStore({ bucket, endpoint, credentials: { accessKeyId: "WRONG", secretAccessKey: "WRONG" } }),
    ).rejects.toThrow(`the secrets bucket "${bucket}" cannot be used: InvalidAccessKeyId`)
  })
})

type Recorded = { method: string; path: string; headers: IncomingHttpHeaders }

/** An HTTP proxy in front of s3rver that records each request's method, path and headers. */
async function recordingProxy(): Promise<{ url: string; requests: Recorded[] }> {
  const target = new URL(endpoint)
  const requests: Recorded[] = []
  const server: Server = createServer((incoming, outgoing) => {
    requests.push({ method: incoming.method ?? "", path: incoming.url ?? "", headers: incoming.headers })
    const forward = request(
      {
        host: target.hostname,
        port: target.port,
        method: incoming.method,
        path: incoming.url,
        headers: incoming.headers,
      },
      (answer) => {
        outgoing.writeHead(answer.statusCode ?? 502, answer.headers)
        answer.pipe(outgoing)
      },
    )
    incoming.pipe(forward)
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, requests }
}

describe("S3 server-side encryption on the wire", () => {
  const customerKey = randomBytes(32)
  for (const [mode, encryption, onPut, onGet] of [
    ["sse-s3", { mode: "sse-s3" }, { "x-amz-server-side-encryption": "AES256" }, {}],
    [
      "sse-kms",
      { mode: "sse-kms", kmsKeyId: "arn:aws:kms:us-east-1:111122223333:key/runnel-test" },
      {
        "x-amz-server-side-encryption": "aws:kms",
        "x-amz-server-side-encryption-aws-kms-key-id": "arn:aws:kms:us-east-1:111122223333:key/runnel-test",
      },
      {},
    ],
    [
      "sse-c",
      { mode: "sse-c", customerKey },
      {
        "x-amz-server-side-encryption-customer-algorithm": "AES256",
        "x-amz-server-side-encryption-customer-key": customerKey.toString("base64"),
        "x-amz-server-side-encryption-customer-key-md5": createHash("md5").update(customerKey).digest("base64"),
      },
      {
        "x-amz-server-side-encryption-customer-algorithm": "AES256",
        "x-amz-server-side-encryption-customer-key": customerKey.toString("base64"),
        "x-amz-server-side-encryption-customer-key-md5": createHash("md5").update(customerKey).digest("base64"),
      },
    ],
  ] as const) {
    it(`sends ${mode}'s headers on every put, and what reading needs on every get`, async () => {
      const proxy = await recordingProxy()
      const store = await open({ endpoint: proxy.url, encryption, prefix: `sse-${mode}`, passphrase: "p" })
      await store.set(globalScope, { A: "value-a", B: "value-b" })
      await store.get(globalScope, "A")
      await store.get(globalScope, "B")
      const puts = proxy.requests.filter((r) => r.method === "PUT")
      const gets = proxy.requests.filter((r) => r.method === "GET" && r.path.includes("/global/"))
      expect(puts).toHaveLength(2)
      expect(gets).toHaveLength(2)
      for (const put of puts) expect(put.headers, put.path).toMatchObject(onPut)
      for (const get of gets) {
        expect(get.headers, get.path).toMatchObject(onGet)
        if (mode !== "sse-c") expect(get.headers["x-amz-server-side-encryption-customer-key"]).toBeUndefined()
      }
    })
  }
})
