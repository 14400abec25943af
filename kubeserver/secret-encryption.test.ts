import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto"
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { DatabaseSync } from "node:sqlite"
import { afterEach, describe, expect, it } from "vitest"
import type { RunningApi } from "./embedded-api.fixture.ts"
import { startEmbeddedApi, testCrds } from "./embedded-api.fixture.ts"
import { createEmbeddedApi } from "./embedded-api.ts"
import type { KubeObject } from "./object-meta.ts"
import { SqliteObjectStore } from "./object-store.ts"
import { secretType } from "./resource-types.ts"
import { SecretCipher } from "./secret-encryption.ts"

const b64 = (text: string) => Buffer.from(text).toString("base64")
const secrets = "/api/v1/namespaces/default/secrets"

const cleanups: (() => unknown)[] = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

async function start(options: Parameters<typeof startEmbeddedApi>[0] = {}) {
  const running = await startEmbeddedApi(options)
  cleanups.push(() => running.close())
  return running
}

function tempDir() {
  const dir = mkdtempSync(join(tmpdir(), "runnel-kube-enc-"))
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

async function call(running: RunningApi, method: string, path: string, body?: unknown, contentType?: string) {
  const response = await fetch(running.server + path, {
    method,
    headers: { "Content-Type": contentType ?? "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  return { code: response.status, body: (await response.json()) as KubeObject & { items?: KubeObject[] } }
}

/** The first `count` events of a watch. */
async function watchEvents(running: RunningApi, query: string, count: number) {
  const controller = new AbortController()
  const response = await fetch(`${running.server}${secrets}?watch=true&${query}`, { signal: controller.signal })
  const reader = (response.body as ReadableStream<Uint8Array>).pipeThrough(new TextDecoderStream()).getReader()
  let text = ""
  const timeout = setTimeout(() => controller.abort(), 5000)
  try {
    while (text.split("\n").length <= count) {
      const { value, done } = await reader.read()
      if (done) break
      text += value
    }
  } finally {
    clearTimeout(timeout)
    controller.abort()
  }
  return text
    .split("\n")
    .slice(0, count)
    .map((line) => JSON.parse(line) as { type: string; object: KubeObject })
}

/** The bytes of the database and its write-ahead log, as they are on disk now. */
function onDisk(db: string) {
  return Buffer.concat([readFileSync(db), existsSync(`${db}-wal`) ? readFileSync(`${db}-wal`) : Buffer.alloc(0)])
}

const plain = "hunter2-webhook-secret-value"
const plain2 = "correct-horse-battery-staple"

describe("encryption at rest of Secrets", () => {
  it("keeps Secrets' values out of the database and its WAL, while clients see them as ever", async () => {
    const running = await start()
    const db = join(running.dir, "kube.db")
    const created = await call(running, "POST", secrets, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "hook", labels: { app: "runnel" } },
      stringData: { webhookSecret: plain },
    })
    expect(created.code).toBe(201)
    expect(created.body.data).toEqual({ webhookSecret: b64(plain) })
    const patched = await call(
      running,
      "PATCH",
      `${secrets}/hook`,
      { data: { other: b64(plain2) } },
      "application/merge-patch+json",
    )
    expect(patched.code).toBe(200)
    // A control: a custom resource is stored as it was, so the files read here are the right ones.
    const pipeline = await call(running, "POST", "/apis/runnel.dev/v1alpha1/namespaces/default/pipelines", {
      apiVersion: "runnel.dev/v1alpha1",
      kind: "Pipeline",
      metadata: { name: "control" },
      spec: { content: "plain-control-marker" },
    })
    expect(pipeline.code).toBe(201)

    const bytes = onDisk(db)
    expect(bytes.includes("plain-control-marker")).toBe(true)
    for (const value of [plain, plain2, b64(plain), b64(plain2)]) expect(bytes.includes(value)).toBe(false)

    const data = { webhookSecret: b64(plain), other: b64(plain2) }
    const got = await call(running, "GET", `${secrets}/hook`)
    expect(got.body).toMatchObject({ data, metadata: { resourceVersion: patched.body.metadata.resourceVersion } })
    const listed = await call(running, "GET", `${secrets}?labelSelector=app%3Drunnel&fieldSelector=type%3DOpaque`)
    expect(listed.body.items?.map((item) => item.data)).toEqual([data])
    // A snapshot of an earlier version comes from the (encrypted) history.
    const snapshot = await call(
      running,
      "GET",
      `${secrets}?resourceVersion=${created.body.metadata.resourceVersion}&resourceVersionMatch=Exact`,
    )
    expect(snapshot.body.items?.map((item) => item.data)).toEqual([{ webhookSecret: b64(plain) }])
    const resumed = await watchEvents(
      running,
      `resourceVersion=${Number(created.body.metadata.resourceVersion) - 1}`,
      2,
    )
    expect(resumed.map((event) => [event.type, event.object.data])).toEqual([
      ["ADDED", { webhookSecret: b64(plain) }],
      ["MODIFIED", data],
    ])
    const initial = await watchEvents(running, "resourceVersion=0", 1)
    expect(initial.map((event) => [event.type, event.object.data])).toEqual([["ADDED", data]])

    // Deleting leaves the last state in the history, encrypted too.
    expect((await call(running, "DELETE", `${secrets}/hook`)).code).toBe(200)
    const afterDelete = onDisk(db)
    for (const value of [plain, plain2, b64(plain), b64(plain2)]) expect(afterDelete.includes(value)).toBe(false)
  })

  it("makes the key file with mode 0600 and reuses it on reopen; a wrong or missing key fails at open", async () => {
    const dir = tempDir()
    const db = join(dir, "kube.db")
    const keyFile = `${db}.key`
    const first = createEmbeddedApi({ db, crds: testCrds })
    first.resources.create(secretType, "default", {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "hook" },
      data: { token: b64(plain) },
    })
    first.close()
    expect(statSync(keyFile).mode & 0o777).toBe(0o600)
    const key = readFileSync(keyFile, "utf8")
    expect(Buffer.from(key.trim(), "base64")).toHaveLength(32)

    const second = createEmbeddedApi({ db, crds: testCrds })
    expect(second.resources.store.get({ resource: "/secrets", namespace: "default", name: "hook" })?.data).toEqual({
      token: b64(plain),
    })
    second.close()
    expect(readFileSync(keyFile, "utf8")).toBe(key)

    writeFileSync(keyFile, `${randomBytes(32).toString("base64")}\n`)
    expect(() => createEmbeddedApi({ db, crds: testCrds })).toThrow(
      `cannot open the embedded Kubernetes API database "${db}": its Secrets were encrypted with another key than the key file "${keyFile}"`,
    )
    expect(() => createEmbeddedApi({ db, crds: testCrds, secretKey: randomBytes(32) })).toThrow(
      "encrypted with another key than the secretKey option",
    )
    writeFileSync(keyFile, "not a key\n")
    expect(() => createEmbeddedApi({ db, crds: testCrds })).toThrow(`the key file "${keyFile}"`)
    rmSync(keyFile)
    expect(() => createEmbeddedApi({ db, crds: testCrds })).toThrow(
      `its Secrets are encrypted with the key in "${keyFile}", and that file is missing`,
    )
    expect(existsSync(keyFile)).toBe(false)

    // The right key given in the options opens it, and no key file is needed then.
    const third = createEmbeddedApi({ db, crds: testCrds, secretKey: Buffer.from(key.trim(), "base64") })
    expect(third.resources.store.get({ resource: "/secrets", namespace: "default", name: "hook" })?.data).toEqual({
      token: b64(plain),
    })
    third.close()
  })

  it("reads a database written before encryption, and encrypts its Secrets at open", async () => {
    const dir = tempDir()
    const db = join(dir, "kube.db")
    writeLegacyDatabase(db)
    expect(onDisk(db).includes(b64(plain))).toBe(true)

    const running = await start({ db })
    expect(existsSync(`${db}.key`)).toBe(true)
    const bytes = onDisk(db)
    expect(bytes.includes("plain-control-marker")).toBe(true)
    for (const value of [b64(plain), b64(plain2)]) expect(bytes.includes(value)).toBe(false)
    const got = await call(running, "GET", `${secrets}/hook`)
    expect(got.body).toMatchObject({ data: { token: b64(plain2) }, metadata: { resourceVersion: "2", uid: "u-1" } })
    const resumed = await watchEvents(running, "resourceVersion=0&sendInitialEvents=true", 1)
    expect(resumed.map((event) => event.object.data)).toEqual([{ token: b64(plain2) }])
    const history = running.api.resources.store.eventsSince("/secrets", "default", 0)
    expect(history.map((event) => [event.type, event.object.data, event.previous?.data])).toEqual([
      ["ADDED", { token: b64(plain) }, undefined],
      ["MODIFIED", { token: b64(plain2) }, { token: b64(plain) }],
    ])
    const created = await call(running, "POST", secrets, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "next" },
      data: { token: b64("after-the-upgrade") },
    })
    expect(Number(created.body.metadata.resourceVersion)).toBeGreaterThan(3)
  })

  it("reads a plaintext row at the store and encrypts it on its next write; a row moved elsewhere does not decrypt", () => {
    const dir = tempDir()
    const database = new DatabaseSync(join(dir, "kube.db"))
    cleanups.push(() => database.close())
    const store = new SqliteObjectStore({ db: database, secretKey: randomBytes(32) })
    const secret = (name: string, value: string): KubeObject => ({
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name, namespace: "default", uid: `uid-${name}` },
      data: { token: b64(value) },
    })
    const a = store.create("/secrets", secret("a", plain))
    store.create("/secrets", secret("b", plain2))
    const raw = (name: string) =>
      (
        database.prepare("SELECT object FROM kube_objects WHERE resource = '/secrets' AND name = ?").get(name) as {
          object: string
        }
      ).object
    expect(SecretCipher.isSealed(raw("a"))).toBe(true)

    database
      .prepare("UPDATE kube_objects SET object = ? WHERE resource = '/secrets' AND name = 'a'")
      .run(JSON.stringify({ ...a, data: { token: b64("left-in-plaintext") } }))
    expect(store.get({ resource: "/secrets", namespace: "default", name: "a" })?.data).toEqual({
      token: b64("left-in-plaintext"),
    })
    expect(store.getByUid("uid-a")?.object.data).toEqual({ token: b64("left-in-plaintext") })
    store.update("/secrets", { ...a, data: { token: b64("rewritten") } })
    expect(SecretCipher.isSealed(raw("a"))).toBe(true)
    expect([...store.list("/secrets", "default")].map((item) => item.data)).toEqual([
      { token: b64("rewritten") },
      { token: b64(plain2) },
    ])

    database.prepare("UPDATE kube_objects SET object = ? WHERE resource = '/secrets' AND name = 'b'").run(raw("a"))
    expect(() => store.get({ resource: "/secrets", namespace: "default", name: "b" })).toThrow(
      "cannot decrypt the stored /secrets default/b",
    )
    // Other kinds are stored as plain JSON.
    store.create("g/things", {
      apiVersion: "v1",
      kind: "Thing",
      metadata: { name: "t", namespace: "default", uid: "t" },
    })
    expect(
      (database.prepare("SELECT object FROM kube_objects WHERE resource = 'g/things'").get() as { object: string })
        .object,
    ).toMatch(/^\{/)
    store.close()
  })

  it("seals with a fresh IV every time, as text only the same key and object open", () => {
    const cipher = new SecretCipher(randomBytes(32))
    const one = cipher.seal("same", "/secrets/default/a")
    expect(cipher.seal("same", "/secrets/default/a")).not.toBe(one)
    expect(cipher.unseal(one, "/secrets/default/a")).toBe("same")
    expect(() => cipher.unseal(one, "/secrets/default/b")).toThrow()
    expect(() => new SecretCipher(randomBytes(32)).unseal(one, "/secrets/default/a")).toThrow()
    expect(() => cipher.unseal(one.slice(0, 40), "/secrets/default/a")).toThrow()
    expect(() => new SecretCipher(randomBytes(16))).toThrow(
      "the secret key of the embedded Kubernetes API must be 32 bytes, not 16",
    )
  })

  it("keeps the stored form of earlier versions: prefix, then base64 of IV, ciphertext and tag", () => {
    const key = randomBytes(32)
    const aad = "/secrets/default/hook"
    // Sealed here with node:crypto alone, as the embedded API wrote Secrets before lib/crypto.
    const iv = randomBytes(12)
    const cipher = createCipheriv("aes-256-gcm", key, iv, { authTagLength: 16 })
    cipher.setAAD(Buffer.from(aad, "utf8"))
    const ciphertext = Buffer.concat([cipher.update('{"kind":"Secret"}', "utf8"), cipher.final()])
    const stored = `k8s:enc:aesgcm:v1:runnel:${Buffer.concat([iv, ciphertext, cipher.getAuthTag()]).toString("base64")}`
    expect(new SecretCipher(key).open(stored, aad)).toBe('{"kind":"Secret"}')

    const sealed = new SecretCipher(key).seal("text", aad)
    const bytes = Buffer.from(sealed.slice("k8s:enc:aesgcm:v1:runnel:".length), "base64")
    const decipher = createDecipheriv("aes-256-gcm", key, bytes.subarray(0, 12), { authTagLength: 16 })
    decipher.setAAD(Buffer.from(aad, "utf8"))
    decipher.setAuthTag(bytes.subarray(bytes.length - 16))
    expect(Buffer.concat([decipher.update(bytes.subarray(12, bytes.length - 16)), decipher.final()]).toString()).toBe(
      "text",
    )
  })

  it("uses a random key for an in-memory database", () => {
    const api = createEmbeddedApi({ db: ":memory:", crds: testCrds })
    api.resources.create(secretType, "default", {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "m" },
      stringData: { token: plain },
    })
    expect(api.resources.store.get({ resource: "/secrets", namespace: "default", name: "m" })?.data).toEqual({
      token: b64(plain),
    })
    api.close()
    expect(existsSync(":memory:.key")).toBe(false)
  })
})

/** A database as the embedded API wrote it before encryption at rest: a Secret created then updated, and a Pipeline. */
function writeLegacyDatabase(path: string) {
  const db = new DatabaseSync(path)
  db.exec(`
PRAGMA journal_mode = WAL;
CREATE TABLE kube_objects (resource TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL, uid TEXT NOT NULL UNIQUE,
  version INTEGER NOT NULL, object TEXT NOT NULL, PRIMARY KEY (resource, namespace, name)) WITHOUT ROWID;
CREATE TABLE kube_owner_refs (owner_uid TEXT NOT NULL, resource TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
  PRIMARY KEY (owner_uid, resource, namespace, name)) WITHOUT ROWID;
CREATE TABLE kube_events (version INTEGER PRIMARY KEY, type TEXT NOT NULL, resource TEXT NOT NULL, namespace TEXT NOT NULL,
  name TEXT NOT NULL, object TEXT NOT NULL, previous TEXT);
CREATE INDEX kube_events_by_resource ON kube_events (resource, version);
CREATE TABLE kube_counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
`)
  const secret = (version: number, value: string) =>
    JSON.stringify({
      apiVersion: "v1",
      data: { token: b64(value) },
      kind: "Secret",
      metadata: {
        creationTimestamp: "2025-01-01T00:00:00Z",
        name: "hook",
        namespace: "default",
        resourceVersion: String(version),
        uid: "u-1",
      },
      type: "Opaque",
    })
  const pipeline = JSON.stringify({
    apiVersion: "runnel.dev/v1alpha1",
    kind: "Pipeline",
    metadata: {
      creationTimestamp: "2025-01-01T00:00:00Z",
      generation: 1,
      name: "control",
      namespace: "default",
      resourceVersion: "3",
      uid: "u-2",
    },
    spec: { content: "plain-control-marker" },
  })
  const object = db.prepare("INSERT INTO kube_objects VALUES (?, 'default', ?, ?, ?, ?)")
  object.run("/secrets", "hook", "u-1", 2, secret(2, plain2))
  object.run("runnel.dev/pipelines", "control", "u-2", 3, pipeline)
  const event = db.prepare("INSERT INTO kube_events VALUES (?, ?, ?, 'default', ?, ?, ?)")
  event.run(1, "ADDED", "/secrets", "hook", secret(1, plain), null)
  event.run(2, "MODIFIED", "/secrets", "hook", secret(2, plain2), secret(1, plain))
  event.run(3, "ADDED", "runnel.dev/pipelines", "control", pipeline, null)
  db.exec("INSERT INTO kube_counters VALUES ('version', 3)")
  db.close()
}
