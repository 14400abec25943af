import { createCipheriv } from "node:crypto"
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { DatabaseSync } from "node:sqlite"
import { describe, expect, it, onTestFinished } from "vitest"
import { RunnelError, SystemError } from "../core/errors.ts"
import { globalScope, pipelineScope, type SecretStore } from "./secret-store.ts"
import { secretStoreContract } from "./secret-store-contract.fixture.ts"
import { openSqliteSecretStore, type SqliteSecretStoreOptions } from "./sqlite-secret-store.ts"

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "runnel-secrets-"))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

const tempFile = () => join(tempDir(), "secrets.db")

async function open(options: SqliteSecretStoreOptions): Promise<SecretStore> {
  const store = await openSqliteSecretStore(options)
  onTestFinished(() => store.close())
  return store
}

/** A second connection to the file, as an attacker with the file (but not the key) would have. */
function rawDb(path: string): DatabaseSync {
  const db = new DatabaseSync(path, { timeout: 5_000 })
  onTestFinished(() => db.close())
  return db
}

const pipelineA = pipelineScope("0b9c7c9e-5a55-4c8e-9d59-1f1f2c3a4b5c")
const pipelineB = pipelineScope("7e1d2f3a-0000-4000-8000-abcdefabcdef")

for (const kind of ["file with a key file", "file with a passphrase", ":memory:"] as const) {
  secretStoreContract(`SQLite (${kind})`, () => {
    if (kind === ":memory:") return openSqliteSecretStore({ path: ":memory:" })
    const path = tempFile()
    return openSqliteSecretStore(kind === "file with a passphrase" ? { path, passphrase: "correct horse" } : { path })
  })
}

describe("SQLite secret store encryption", () => {
  it("never writes a plaintext value to the database or its WAL", async () => {
    const path = tempFile()
    const value = "plaintext-canary-9f8e7d6c5b4a"
    const store = await openSqliteSecretStore({ path })
    await store.set(globalScope, { CANARY: value })
    await store.set(pipelineA, { CANARY: value, OTHER: `${value}-2` })
    const needle = Buffer.from(value)
    const files = [path, `${path}-wal`].filter((file) => existsSync(file))
    expect(files).toContain(`${path}-wal`)
    for (const file of files) expect(readFileSync(file).includes(needle), file).toBe(false)
    // The search itself works: key names are stored in the clear.
    expect(files.some((file) => readFileSync(file).includes(Buffer.from("CANARY")))).toBe(true)
    await store.close()
    // Closing the last connection checkpoints the WAL into the database file.
    expect(readFileSync(path).includes(needle)).toBe(false)
    const reopened = await open({ path })
    expect(await reopened.get(pipelineA, "CANARY")).toBe(value)
  })

  it("uses a fresh IV for every value, so equal values do not look equal", async () => {
    const path = tempFile()
    const store = await open({ path })
    await store.set(globalScope, { A: "same", B: "same" })
    await store.set(globalScope, { A: "same" })
    const rows = rawDb(path).prepare("SELECT iv, ciphertext FROM secrets").all()
    const ivs = new Set(rows.map((row) => Buffer.from(row.iv as Uint8Array).toString("hex")))
    expect(ivs.size).toBe(2)
    expect(rows.map((row) => (row.iv as Uint8Array).length)).toEqual([12, 12])
  })

  it("fails with a clear error, not garbage, when a stored byte is altered", async () => {
    const path = tempFile()
    const store = await open({ path })
    await store.set(pipelineA, { TOKEN: "do-not-leak-me", FINE: "ok" })
    const db = rawDb(path)
    const row = db.prepare("SELECT ciphertext FROM secrets WHERE key = 'TOKEN'").get()
    const bytes = Buffer.from(row?.ciphertext as Uint8Array)
    bytes[0] = (bytes[0] ?? 0) ^ 0x01
    db.prepare("UPDATE secrets SET ciphertext = ? WHERE key = 'TOKEN'").run(bytes)
    const error = await store.get(pipelineA, "TOKEN").catch((error: unknown) => error)
    expect(error).toBeInstanceOf(SystemError)
    expect((error as Error).message).toBe(
      `secret "TOKEN" in scope "${pipelineA}" cannot be decrypted: its stored bytes were altered or copied from another secret; set it again`,
    )
    await expect(store.values(pipelineA)).rejects.toThrow("cannot be decrypted")
    expect(await store.get(pipelineA, "FINE")).toBe("ok")
    // Setting it again mends it.
    await store.set(pipelineA, { TOKEN: "new" })
    expect(await store.get(pipelineA, "TOKEN")).toBe("new")
  })

  it("fails when an altered auth tag is stored", async () => {
    const path = tempFile()
    const store = await open({ path })
    await store.set(globalScope, { TOKEN: "value" })
    rawDb(path).exec("UPDATE secrets SET tag = zeroblob(16)")
    await expect(store.get(globalScope, "TOKEN")).rejects.toThrow(
      'secret "TOKEN" in scope "global" cannot be decrypted',
    )
  })

  it("does not decrypt a ciphertext copied to another key or scope", async () => {
    const path = tempFile()
    const store = await open({ path })
    await store.set(pipelineA, { SOURCE: "pipeline-a-secret", TARGET: "other" })
    await store.set(pipelineB, { SOURCE: "pipeline-b-secret" })
    const db = rawDb(path)
    const copy = `UPDATE secrets SET (iv, tag, ciphertext) =
                    (SELECT iv, tag, ciphertext FROM secrets WHERE scope = ? AND key = 'SOURCE')
                  WHERE scope = ? AND key = ?`
    db.prepare(copy).run(pipelineA, pipelineA, "TARGET")
    db.prepare(copy).run(pipelineA, pipelineB, "SOURCE")
    await expect(store.get(pipelineA, "TARGET")).rejects.toThrow("cannot be decrypted")
    await expect(store.get(pipelineB, "SOURCE")).rejects.toThrow("cannot be decrypted")
    expect(await store.get(pipelineA, "SOURCE")).toBe("pipeline-a-secret")
  })
})

describe("SQLite secret store keys", () => {
  it("reads a database as earlier versions wrote it, sealed with node:crypto alone", async () => {
    const path = tempFile()
    const key = Buffer.alloc(32, 7)
    writeFileSync(`${path}.key`, `${key.toString("base64")}\n`, { mode: 0o600 })
    const seal = (text: string, aad: Buffer) => {
      const iv = Buffer.alloc(12, 1)
      const cipher = createCipheriv("aes-256-gcm", key, iv, { authTagLength: 16 })
      cipher.setAAD(aad)
      const ciphertext = Buffer.concat([cipher.update(text, "utf8"), cipher.final()])
      return [iv, cipher.getAuthTag(), ciphertext]
    }
    const db = new DatabaseSync(path)
    db.exec(`PRAGMA journal_mode = WAL;
      CREATE TABLE secrets (scope TEXT NOT NULL, key TEXT NOT NULL, iv BLOB NOT NULL, tag BLOB NOT NULL,
        ciphertext BLOB NOT NULL, PRIMARY KEY (scope, key)) WITHOUT ROWID;
      CREATE TABLE key_check (id INTEGER PRIMARY KEY CHECK (id = 1), source TEXT NOT NULL, iv BLOB NOT NULL,
        tag BLOB NOT NULL, ciphertext BLOB NOT NULL);
      PRAGMA user_version = 1;`)
    db.prepare("INSERT INTO key_check VALUES (1, 'key-file', ?, ?, ?)").run(
      ...seal("runnel secret store key check", Buffer.from("runnel:key-check")),
    )
    const rowAad = Buffer.from(JSON.stringify(["runnel:secret", pipelineA, "TOKEN"]), "utf8")
    db.prepare("INSERT INTO secrets VALUES (?, 'TOKEN', ?, ?, ?)").run(pipelineA, ...seal("from-before", rowAad))
    db.close()

    const store = await open({ path })
    expect(await store.get(pipelineA, "TOKEN")).toBe("from-before")
    expect(readFileSync(`${path}.key`, "utf8")).toBe(`${key.toString("base64")}\n`)
    writeFileSync(`${path}.key`, `${Buffer.alloc(32, 8).toString("base64")}\n`)
    await expect(openSqliteSecretStore({ path })).rejects.toThrow(`the key in "${path}.key" does not match`)
  })

  it("derives the key from the passphrase and reopens with the same one, making no key file", async () => {
    const path = tempFile()
    const first = await openSqliteSecretStore({ path, passphrase: "hunter2" })
    await first.set(globalScope, { A: "1" })
    await first.close()
    const second = await open({ path, passphrase: "hunter2" })
    expect(await second.get(globalScope, "A")).toBe("1")
    expect(existsSync(`${path}.key`)).toBe(false)
  })

  it("refuses a wrong passphrase at open, saying it does not match", async () => {
    const path = tempFile()
    const first = await openSqliteSecretStore({ path, passphrase: "right" })
    await first.set(globalScope, { A: "1" })
    await first.close()
    const error = await openSqliteSecretStore({ path, passphrase: "wrong" }).catch((error: unknown) => error)
    expect(error).toBeInstanceOf(RunnelError)
    expect(error).toMatchObject({ code: "secrets_key_mismatch" })
    expect((error as Error).message).toBe(
      `the passphrase does not match the one the secret store "${path}" was created with; start with that passphrase (--secrets-sqlite-passphrase), or give a new passphrase with a new database file`,
    )
    expect((error as Error).message).not.toContain("wrong")
    expect((error as Error).message).not.toContain("right")
    // The file is still usable with the right passphrase.
    const again = await open({ path, passphrase: "right" })
    expect(await again.get(globalScope, "A")).toBe("1")
  })

  it("refuses a wrong passphrase even for a database with no secrets yet", async () => {
    const path = tempFile()
    await (await openSqliteSecretStore({ path, passphrase: "right" })).close()
    await expect(openSqliteSecretStore({ path, passphrase: "wrong" })).rejects.toThrow("the passphrase does not match")
  })

  it("refuses to open a passphrase database without its passphrase, and makes no key file", async () => {
    const path = tempFile()
    await (await openSqliteSecretStore({ path, passphrase: "right" })).close()
    await expect(openSqliteSecretStore({ path })).rejects.toThrow(
      `the secret store "${path}" was created with a passphrase and none was given: the passphrase does not match`,
    )
    expect(existsSync(`${path}.key`)).toBe(false)
  })

  it("refuses a passphrase for a database created with a key file", async () => {
    const path = tempFile()
    await (await openSqliteSecretStore({ path })).close()
    await expect(openSqliteSecretStore({ path, passphrase: "any" })).rejects.toThrow(
      expect.objectContaining({
        code: "secrets_key_mismatch",
        message: expect.stringContaining("the passphrase does not match the key"),
      }),
    )
  })

  it("creates the key file with mode 0600 beside the database, and reuses it on reopen", async () => {
    const path = tempFile()
    const first = await openSqliteSecretStore({ path })
    await first.set(globalScope, { A: "1" })
    await first.close()
    const keyFile = `${path}.key`
    expect(statSync(keyFile).mode & 0o777).toBe(0o600)
    const key = readFileSync(keyFile, "utf8")
    expect(key).toMatch(/^[A-Za-z0-9+/]{43}=\n$/)
    const second = await open({ path })
    expect(await second.get(globalScope, "A")).toBe("1")
    expect(readFileSync(keyFile, "utf8")).toBe(key)
  })

  it("keeps the key where keyFile says", async () => {
    const dir = tempDir()
    const path = join(dir, "secrets.db")
    const keyFile = join(dir, "elsewhere.key")
    const first = await openSqliteSecretStore({ path, keyFile })
    await first.set(globalScope, { A: "1" })
    await first.close()
    expect(existsSync(keyFile)).toBe(true)
    expect(existsSync(`${path}.key`)).toBe(false)
    const second = await open({ path, keyFile })
    expect(await second.get(globalScope, "A")).toBe("1")
  })

  it("refuses to open when the key file is gone, instead of making a new key", async () => {
    const path = tempFile()
    await (await openSqliteSecretStore({ path })).close()
    rmSync(`${path}.key`)
    await expect(openSqliteSecretStore({ path })).rejects.toThrow(
      `the secret store "${path}" was created with the key in "${path}.key", and that file is missing`,
    )
    expect(existsSync(`${path}.key`)).toBe(false)
  })

  it("refuses a key file holding another key", async () => {
    const path = tempFile()
    await (await openSqliteSecretStore({ path })).close()
    writeFileSync(`${path}.key`, `${Buffer.alloc(32, 7).toString("base64")}\n`)
    await expect(openSqliteSecretStore({ path })).rejects.toThrow(
      `the key in "${path}.key" does not match the one the secret store "${path}" was created with`,
    )
  })

  it("refuses a key file that holds no key, without quoting it", async () => {
    const path = tempFile()
    writeFileSync(`${path}.key`, "not-a-key-at-all\n", { mode: 0o600 })
    const error = await openSqliteSecretStore({ path }).catch((error: unknown) => error)
    expect((error as Error).message).toBe(
      `the secrets key file "${path}.key" does not hold a key: it must hold 32 random bytes in base64`,
    )
  })

  it("refuses an empty passphrase, and a passphrase with a key file", async () => {
    const path = tempFile()
    await expect(openSqliteSecretStore({ path, passphrase: "" })).rejects.toThrow(
      expect.objectContaining({ status: 400, message: expect.stringContaining("passphrase is empty") }),
    )
    await expect(openSqliteSecretStore({ path, passphrase: "p", keyFile: `${path}.k` })).rejects.toThrow(
      "a passphrase or a key file, not both",
    )
  })
})

describe("SQLite secret store shared by two processes", () => {
  it("lets two stores on one file see each other's writes", async () => {
    const path = tempFile()
    const api = await open({ path })
    const operator = await open({ path })
    await api.set(pipelineA, { FROM_API: "a" })
    expect(await operator.get(pipelineA, "FROM_API")).toBe("a")
    await operator.set(pipelineA, { FROM_OPERATOR: "o" })
    expect(await api.keys(pipelineA)).toEqual(["FROM_API", "FROM_OPERATOR"])
    expect(await operator.delete(pipelineA, "FROM_API")).toBe(true)
    expect(await api.get(pipelineA, "FROM_API")).toBeUndefined()
  })

  it("lets two stores with one passphrase share a file", async () => {
    const path = tempFile()
    const api = await open({ path, passphrase: "shared" })
    const operator = await open({ path, passphrase: "shared" })
    await api.set(globalScope, { G: "g" })
    expect(await operator.values(globalScope)).toEqual(["g"])
  })

  it("uses WAL", async () => {
    const path = tempFile()
    await open({ path })
    expect(rawDb(path).prepare("PRAGMA journal_mode").get()?.journal_mode).toBe("wal")
  })
})
