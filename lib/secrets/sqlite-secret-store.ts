import type { DatabaseSync, StatementSync } from "node:sqlite"
import { badRequest, RunnelError, SystemError } from "../core/errors.ts"
import { checkKey, type KeyCheck } from "../crypto/key-check.ts"
import { keyFromFile } from "../crypto/key-file.ts"
import { keyFromPassphrase, randomKey, type Sealed, Sealer } from "../crypto/sealer.ts"
import { migrate, openDatabase, transaction } from "../sqlite/database.ts"
import { assertSecretScope, checkedEntries, type SecretStore } from "./secret-store.ts"

export type SqliteSecretStoreOptions = {
  /** The database file; `:memory:` for secrets that end with the process. */
  path: string
  /** The AES-256 key is the SHA-256 of its UTF-8 bytes (interface.md). Without one, the key lives in `keyFile`. */
  passphrase?: string
  /** Where the random key is kept when no passphrase is given; `<path>.key` unless set. Created with mode 0600. */
  keyFile?: string
}

/** Schema steps for migrate(): append new steps, never edit one that has shipped. */
const migrations: readonly string[] = [
  `CREATE TABLE secrets (
     scope TEXT NOT NULL,
     key TEXT NOT NULL,
     iv BLOB NOT NULL,
     tag BLOB NOT NULL,
     ciphertext BLOB NOT NULL,
     PRIMARY KEY (scope, key)
   ) WITHOUT ROWID;
   -- One row: a known text encrypted with the key the file was created with, so that a wrong key fails at open.
   CREATE TABLE key_check (
     id INTEGER PRIMARY KEY CHECK (id = 1),
     source TEXT NOT NULL,
     iv BLOB NOT NULL,
     tag BLOB NOT NULL,
     ciphertext BLOB NOT NULL
   );`,
]

const busyTimeoutMs = 5_000
const keyFileWhat = (file: string) => `the secrets key file "${file}"`
const keyCheck: KeyCheck = { text: "runnel secret store key check", aad: Buffer.from("runnel:key-check") }

/** How the key of a database was chosen; stored beside the key check, so a mismatch can say what to do. */
type KeySource = "passphrase" | "key-file" | "memory"

/**
 * Opens (creating or migrating) the secret store in the SQLite file at `path`.
 * Two processes (API server and operator) may have one file open at once:
 * WAL lets them read beside each other's writes, and busy_timeout makes a
 * writer wait for the other's transaction instead of failing.
 */
export async function openSqliteSecretStore(options: SqliteSecretStoreOptions): Promise<SecretStore> {
  const { path, passphrase } = options
  if (passphrase === "") {
    throw badRequest("the secrets passphrase is empty: give a non-empty passphrase, or none to use a key file")
  }
  if (passphrase !== undefined && options.keyFile !== undefined) {
    throw badRequest("give the secret store a passphrase or a key file, not both")
  }
  // FULL: secrets are written rarely, and one set must not be lost to a power cut.
  const db = openDatabase(path, { what: "the secret store", busyTimeoutMs, synchronous: "FULL" })
  let sealer: Sealer | undefined
  try {
    migrate(db, migrations)
    const stored = readKeyCheck(db)
    const { key, source } = chooseKey(stored, options)
    sealer = new Sealer(key)
    key.fill(0)
    assertKeyMatches(db, sealer, source, stored, options)
    return new SqliteSecretStore(db, sealer)
  } catch (error) {
    sealer?.close()
    db.close()
    throw error
  }
}

const mismatch = (message: string) => new RunnelError(500, "secrets_key_mismatch", message)
const passphraseFlag = "--secrets-sqlite-passphrase"

type KeyCheckRow = Sealed & { readonly source: KeySource }

function readKeyCheck(db: DatabaseSync): KeyCheckRow | undefined {
  const row = db.prepare("SELECT source, iv, tag, ciphertext FROM key_check WHERE id = 1").get()
  if (row === undefined) return undefined
  return {
    source: String(row.source) as KeySource,
    iv: row.iv as Uint8Array,
    tag: row.tag as Uint8Array,
    ciphertext: row.ciphertext as Uint8Array,
  }
}

/**
 * The key to open the file with. A database that already has a key check
 * says how its key was chosen; a key file it needs is never made up anew,
 * since a new key could not read what the old one wrote.
 */
function chooseKey(
  stored: KeyCheckRow | undefined,
  options: SqliteSecretStoreOptions,
): { key: Buffer; source: KeySource } {
  const { path, passphrase } = options
  if (passphrase !== undefined) return { key: keyFromPassphrase(passphrase), source: "passphrase" }
  if (stored?.source === "passphrase") {
    throw mismatch(
      `the secret store "${path}" was created with a passphrase and none was given: the passphrase does not match the one the database was created with; start with that passphrase (${passphraseFlag})`,
    )
  }
  if (path === ":memory:" && options.keyFile === undefined) return { key: randomKey(), source: "memory" }
  const keyFile = options.keyFile ?? `${path}.key`
  const key = keyFromFile(keyFile, keyFileWhat, {
    mayCreate: stored === undefined,
    missing: () =>
      mismatch(
        `the secret store "${path}" was created with the key in "${keyFile}", and that file is missing; restore it (a new key cannot decrypt the stored secrets)`,
      ),
  })
  return { key, source: "key-file" }
}

/**
 * Checks the key against the file's key check, storing one first if the
 * file has none yet (see lib/crypto/key-check.ts); a key that does not match
 * is refused with what to do, by how the file's key and this one were chosen.
 */
function assertKeyMatches(
  db: DatabaseSync,
  sealer: Sealer,
  source: KeySource,
  stored: KeyCheckRow | undefined,
  options: SqliteSecretStoreOptions,
): void {
  const { matches, stored: check } = checkKey(sealer, keyCheck, {
    stored,
    storeIfMissing: (fresh) =>
      transaction(db, () => {
        const existing = readKeyCheck(db)
        if (existing !== undefined) return existing
        db.prepare("INSERT INTO key_check (id, source, iv, tag, ciphertext) VALUES (1, ?, ?, ?, ?)").run(
          source,
          fresh.iv,
          fresh.tag,
          fresh.ciphertext,
        )
        return { ...fresh, source }
      }),
  })
  if (matches) return
  const { path } = options
  if (source === "passphrase" && check.source === "passphrase") {
    throw mismatch(
      `the passphrase does not match the one the secret store "${path}" was created with; start with that passphrase (${passphraseFlag}), or give a new passphrase with a new database file`,
    )
  }
  if (source === "passphrase") {
    throw mismatch(
      `the passphrase does not match the key the secret store "${path}" was created with: it was created without a passphrase, with its key in a key file; start without ${passphraseFlag}, or give the passphrase with a new database file`,
    )
  }
  throw mismatch(
    `the key in "${options.keyFile ?? `${path}.key`}" does not match the one the secret store "${path}" was created with; restore the original key file`,
  )
}

/**
 * Binds a value to its row: a ciphertext copied to another key or scope does
 * not decrypt there. JSON, so that no scope and key pair reads as another.
 */
const rowAad = (scope: string, key: string) => Buffer.from(JSON.stringify(["runnel:secret", scope, key]), "utf8")

class SqliteSecretStore implements SecretStore {
  readonly #db: DatabaseSync
  readonly #sealer: Sealer
  readonly #upsert: StatementSync
  readonly #select: StatementSync
  readonly #selectKeys: StatementSync
  readonly #selectScope: StatementSync
  readonly #delete: StatementSync
  readonly #deleteScope: StatementSync
  #closed = false

  constructor(db: DatabaseSync, sealer: Sealer) {
    this.#db = db
    this.#sealer = sealer
    this.#upsert = db.prepare(
      `INSERT INTO secrets (scope, key, iv, tag, ciphertext) VALUES (?, ?, ?, ?, ?)
       ON CONFLICT (scope, key) DO UPDATE SET iv = excluded.iv, tag = excluded.tag, ciphertext = excluded.ciphertext`,
    )
    this.#select = db.prepare("SELECT iv, tag, ciphertext FROM secrets WHERE scope = ? AND key = ?")
    this.#selectKeys = db.prepare("SELECT key FROM secrets WHERE scope = ? ORDER BY key")
    this.#selectScope = db.prepare("SELECT key, iv, tag, ciphertext FROM secrets WHERE scope = ? ORDER BY key")
    this.#delete = db.prepare("DELETE FROM secrets WHERE scope = ? AND key = ?")
    this.#deleteScope = db.prepare("DELETE FROM secrets WHERE scope = ?")
  }

  async set(scope: string, entries: Readonly<Record<string, string>>): Promise<void> {
    this.#assertOpen()
    const pairs = checkedEntries(scope, entries)
    if (pairs.length === 0) return
    const sealed = pairs.map(([key, value]) => ({ key, ...this.#sealer.seal(value, rowAad(scope, key)) }))
    transaction(this.#db, () => {
      for (const { key, iv, tag, ciphertext } of sealed) this.#upsert.run(scope, key, iv, tag, ciphertext)
    })
  }

  async get(scope: string, key: string): Promise<string | undefined> {
    this.#assertOpen()
    assertSecretScope(scope)
    const row = this.#select.get(scope, key)
    return row === undefined ? undefined : this.#decrypt(scope, key, row)
  }

  async keys(scope: string): Promise<string[]> {
    this.#assertOpen()
    assertSecretScope(scope)
    return this.#selectKeys.all(scope).map((row) => String(row.key))
  }

  async delete(scope: string, key: string): Promise<boolean> {
    this.#assertOpen()
    assertSecretScope(scope)
    return Number(this.#delete.run(scope, key).changes) > 0
  }

  async deleteScope(scope: string): Promise<number> {
    this.#assertOpen()
    assertSecretScope(scope)
    return Number(this.#deleteScope.run(scope).changes)
  }

  async values(scope: string): Promise<string[]> {
    this.#assertOpen()
    assertSecretScope(scope)
    return this.#selectScope.all(scope).map((row) => this.#decrypt(scope, String(row.key), row))
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.#db.close()
    this.#sealer.close()
  }

  #decrypt(scope: string, key: string, row: Record<string, unknown>): string {
    const sealed = { iv: row.iv as Uint8Array, tag: row.tag as Uint8Array, ciphertext: row.ciphertext as Uint8Array }
    const value = this.#sealer.unseal(sealed, rowAad(scope, key))
    if (value === undefined) {
      throw new SystemError(
        `secret "${key}" in scope "${scope}" cannot be decrypted: its stored bytes were altered or copied from another secret; set it again`,
      )
    }
    return value
  }

  #assertOpen(): void {
    if (this.#closed) throw new Error("the secret store is closed")
  }
}
