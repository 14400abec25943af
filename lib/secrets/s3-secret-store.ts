import { createHash } from "node:crypto"
import {
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
} from "@aws-sdk/client-s3"
import { badRequest, RunnelError, SystemError } from "../core/errors.ts"
import { keyFromPassphrase, packSealed, Sealer, unpackSealed } from "../crypto/sealer.ts"
import { assertSecretScope, checkedEntries, type SecretStore } from "./secret-store.ts"

/** Provider-side encryption of every object (contract.md: the neutral `sse-provider` is `sse-s3`). */
export type S3Encryption =
  | { readonly mode: "sse-s3" }
  | { readonly mode: "sse-kms"; readonly kmsKeyId?: string }
  | { readonly mode: "sse-c"; readonly customerKey: Uint8Array }

export type S3SecretStoreOptions = {
  readonly bucket: string
  /** Any S3-compatible server; path-style addressing when given. */
  readonly endpoint?: string
  readonly region?: string
  /** Both or neither; without them the SDK's default chain (environment, profile, IRSA, instance role). */
  readonly credentials?: { readonly accessKeyId: string; readonly secretAccessKey: string }
  /** Application-layer AES-256-GCM, the key the SHA-256 of the passphrase (as for SQLite). */
  readonly passphrase?: string
  readonly encryption?: S3Encryption
  /** Every object key starts with it. */
  readonly prefix?: string
}

/** Object metadata (`x-amz-meta-runnel-sealed`) of a value sealed with the passphrase; plain values have none. */
const sealedMeta = "runnel-sealed"
const sealedFormat = "aes-256-gcm-v1"

/**
 * Opens the store on one bucket and checks at once that the bucket exists and
 * the credentials are accepted: a bucket that does not exist or refused
 * credentials fail here, naming the bucket and the S3 error code.
 */
export async function openS3SecretStore(options: S3SecretStoreOptions): Promise<SecretStore> {
  if (options.passphrase === "") {
    throw badRequest("the S3 secrets passphrase is empty: give a non-empty passphrase, or none")
  }
  const client = new S3Client({
    ...(options.endpoint === undefined ? {} : { endpoint: options.endpoint, forcePathStyle: true }),
    // An S3-compatible server needs some region to sign with; AWS's comes from the SDK's chain without one.
    region: options.region ?? (options.endpoint === undefined ? undefined : "us-east-1"),
    ...(options.credentials === undefined ? {} : { credentials: { ...options.credentials } }),
  })
  const store = new S3SecretStore(client, options)
  try {
    await client.send(new ListObjectsV2Command({ Bucket: options.bucket, Prefix: store.base, MaxKeys: 1 }))
  } catch (error) {
    await store.close()
    throw new RunnelError(
      500,
      "secrets_bucket_unusable",
      `the secrets bucket "${options.bucket}" cannot be used: ${s3Code(error)}${options.endpoint === undefined ? "" : ` (endpoint ${options.endpoint})`}`,
      { cause: error },
    )
  }
  return store
}

/** The S3 error code (NoSuchBucket, InvalidAccessKeyId, AccessDenied, ...), or the error's message when there is none. */
function s3Code(error: unknown): string {
  if (error instanceof S3ServiceException) return error.name
  return error instanceof Error ? error.message : String(error)
}

const isNotFound = (error: unknown) =>
  error instanceof S3ServiceException && (error.name === "NoSuchKey" || error.name === "NotFound")

/** Binds a sealed value to its scope and key, as the SQLite store does: copied elsewhere, it does not open. */
const objectAad = (scope: string, key: string) => Buffer.from(JSON.stringify(["runnel:secret", scope, key]), "utf8")

/**
 * One object per secret under `<prefix>/<scope>/<key>`: scopes `global`,
 * `pipeline/<uid>` and `run/<id>`. With a passphrase the body is the sealed
 * value (iv ‖ ciphertext ‖ tag); without one, the value as it is, resting
 * only under the provider's encryption. set() checks every entry before it
 * writes any, then writes each object (S3 has no transaction across objects).
 */
class S3SecretStore implements SecretStore {
  readonly #client: S3Client
  readonly #bucket: string
  readonly #sealer: Sealer | undefined
  readonly #encryption: S3Encryption | undefined
  /** The prefix with a trailing "/", or "". */
  readonly base: string
  #closed = false

  constructor(client: S3Client, options: S3SecretStoreOptions) {
    this.#client = client
    this.#bucket = options.bucket
    this.#encryption = options.encryption
    if (options.passphrase !== undefined) {
      const key = keyFromPassphrase(options.passphrase)
      this.#sealer = new Sealer(key)
      key.fill(0)
    }
    const prefix = (options.prefix ?? "").replace(/^\/+|\/+$/g, "")
    this.base = prefix === "" ? "" : `${prefix}/`
  }

  async set(scope: string, entries: Readonly<Record<string, string>>): Promise<void> {
    this.#assertOpen()
    const pairs = checkedEntries(scope, entries)
    for (const [key, value] of pairs) {
      const sealer = this.#sealer
      await this.#client.send(
        new PutObjectCommand({
          Bucket: this.#bucket,
          Key: this.#objectKey(scope, key),
          Body:
            sealer === undefined ? Buffer.from(value, "utf8") : packSealed(sealer.seal(value, objectAad(scope, key))),
          ContentType: "application/octet-stream",
          ...(sealer === undefined ? {} : { Metadata: { [sealedMeta]: sealedFormat } }),
          ...this.#putEncryption(),
        }),
      )
    }
  }

  async get(scope: string, key: string): Promise<string | undefined> {
    this.#assertOpen()
    assertSecretScope(scope)
    try {
      const answer = await this.#client.send(
        new GetObjectCommand({ Bucket: this.#bucket, Key: this.#objectKey(scope, key), ...this.#readEncryption() }),
      )
      const body = Buffer.from((await answer.Body?.transformToByteArray()) ?? new Uint8Array())
      return this.#open(scope, key, body, answer.Metadata?.[sealedMeta])
    } catch (error) {
      if (isNotFound(error)) return undefined
      throw error
    }
  }

  async keys(scope: string): Promise<string[]> {
    this.#assertOpen()
    assertSecretScope(scope)
    const folder = this.#folder(scope)
    const keys: string[] = []
    let token: string | undefined
    do {
      const page = await this.#client.send(
        new ListObjectsV2Command({ Bucket: this.#bucket, Prefix: folder, ContinuationToken: token }),
      )
      for (const object of page.Contents ?? []) {
        const name = object.Key?.slice(folder.length) ?? ""
        // Only the scope's own objects: not another scope whose name this one is a prefix of.
        if (name !== "" && !name.includes("/")) keys.push(name)
      }
      token = page.IsTruncated === true ? page.NextContinuationToken : undefined
    } while (token !== undefined)
    return keys.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
  }

  async delete(scope: string, key: string): Promise<boolean> {
    this.#assertOpen()
    assertSecretScope(scope)
    const objectKey = this.#objectKey(scope, key)
    try {
      await this.#client.send(
        new HeadObjectCommand({ Bucket: this.#bucket, Key: objectKey, ...this.#readEncryption() }),
      )
    } catch (error) {
      if (isNotFound(error)) return false
      throw error
    }
    await this.#client.send(new DeleteObjectCommand({ Bucket: this.#bucket, Key: objectKey }))
    return true
  }

  async deleteScope(scope: string): Promise<number> {
    const keys = await this.keys(scope)
    for (const key of keys) {
      await this.#client.send(new DeleteObjectCommand({ Bucket: this.#bucket, Key: this.#objectKey(scope, key) }))
    }
    return keys.length
  }

  async values(scope: string): Promise<string[]> {
    const values: string[] = []
    for (const key of await this.keys(scope)) {
      const value = await this.get(scope, key)
      if (value !== undefined) values.push(value)
    }
    return values
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.#client.destroy()
    this.#sealer?.close()
  }

  #folder(scope: string): string {
    const colon = scope.indexOf(":")
    return `${this.base}${colon < 0 ? scope : `${scope.slice(0, colon)}/${scope.slice(colon + 1)}`}/`
  }

  #objectKey(scope: string, key: string): string {
    return `${this.#folder(scope)}${key}`
  }

  #putEncryption() {
    const encryption = this.#encryption
    if (encryption === undefined) return {}
    if (encryption.mode === "sse-s3") return { ServerSideEncryption: "AES256" as const }
    if (encryption.mode === "sse-kms") {
      return {
        ServerSideEncryption: "aws:kms" as const,
        ...(encryption.kmsKeyId === undefined ? {} : { SSEKMSKeyId: encryption.kmsKeyId }),
      }
    }
    return this.#readEncryption()
  }

  /** Only SSE-C needs headers to read: the key, each time. */
  #readEncryption() {
    const encryption = this.#encryption
    if (encryption?.mode !== "sse-c") return {}
    return {
      SSECustomerAlgorithm: "AES256",
      SSECustomerKey: Buffer.from(encryption.customerKey).toString("base64"),
      SSECustomerKeyMD5: createMd5(encryption.customerKey),
    }
  }

  /** The value of a stored body; a sealed one that does not open (other passphrase, edited object) throws. */
  #open(scope: string, key: string, body: Buffer, sealed: string | undefined): string {
    const sealer = this.#sealer
    if (sealed === undefined) {
      if (sealer === undefined) return body.toString("utf8")
      throw new SystemError(
        `secret "${key}" in scope "${scope}" is stored without the passphrase's encryption, and a store with a passphrase reads only values sealed with it; set it again`,
      )
    }
    if (sealer === undefined) {
      throw new SystemError(
        `secret "${key}" in scope "${scope}" was stored encrypted with a passphrase and none was given; start with that passphrase (--secrets-s3-passphrase)`,
      )
    }
    const value = sealer.unseal(unpackSealed(body), objectAad(scope, key))
    if (value === undefined) {
      throw new SystemError(
        `secret "${key}" in scope "${scope}" cannot be decrypted: the passphrase changed since it was stored, or its object was edited in the bucket; start with the passphrase it was stored with, or set it again`,
      )
    }
    return value
  }

  #assertOpen(): void {
    if (this.#closed) throw new Error("the secret store is closed")
  }
}

function createMd5(bytes: Uint8Array): string {
  return createHash("md5").update(bytes).digest("base64")
}
