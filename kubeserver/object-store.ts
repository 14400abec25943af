import type { DatabaseSync, StatementSync } from "node:sqlite"
import { keyFromFile } from "../lib/crypto/key-file.ts"
import { randomKey } from "../lib/crypto/sealer.ts"
import { type Checkpointer, checkpointer, fallbackPages } from "../lib/sqlite/checkpointer.ts"
import { openDatabase, transaction } from "../lib/sqlite/database.ts"
import type { KubeObject } from "./object-meta.ts"
import { secretType, storageResource } from "./resource-types.ts"
import { SecretCipher } from "./secret-encryption.ts"

const databaseWhat = "the embedded Kubernetes API database"
const keyFileWhat = (file: string) => `the key file "${file}" of the embedded Kubernetes API`

export type EventType = "ADDED" | "MODIFIED" | "DELETED"

/** One write, as watches see it. `previous` is the object before the write (absent for ADDED). */
export type StoredEvent = {
  readonly type: EventType
  readonly version: number
  readonly resource: string
  readonly namespace: string
  readonly name: string
  readonly object: KubeObject
  readonly previous: KubeObject | undefined
}

/** Where an object lives: its kind's storage key (`runnel.dev/pipelines`), namespace ("" when cluster-scoped) and name. */
export type ObjectKey = { readonly resource: string; readonly namespace: string; readonly name: string }

/** Raised when a read asks for a version older than the kept history. */
export class VersionExpiredError extends Error {
  readonly oldest: number
  constructor(requested: number, oldest: number) {
    super(`too old resource version: ${requested} (${oldest})`)
    this.name = "VersionExpiredError"
    this.oldest = oldest
  }
}

export type ListOptions = {
  /** Only keys after this one (namespace, name), for continuing a paginated list. */
  readonly after?: { readonly namespace: string; readonly name: string }
  /** The list as it was at this version (a consistent snapshot across pages); the newest when absent. */
  readonly atVersion?: number
}

/**
 * The embedded API's storage: objects of every kind in one SQLite database,
 * with one resourceVersion counter across all of them and a bounded history of
 * events for watches. It knows nothing of Kubernetes' rules (the resource layer
 * applies those); it keeps objects, versions and ownership, and tells
 * subscribers of every write synchronously, after the write is committed.
 * - Every write increments the version by one and records one event.
 * - `metadata.resourceVersion` of a returned object is always its stored version.
 * - Only one process may write a database at a time.
 */
export interface ObjectStore {
  readonly version: number
  /** Events up to and including this version have been dropped from the history. */
  readonly compactedVersion: number
  get(key: ObjectKey): KubeObject | undefined
  getByUid(uid: string): { resource: string; object: KubeObject } | undefined
  /** Objects of one kind (in one namespace, or all when `namespace` is undefined), ordered by namespace then name. */
  list(resource: string, namespace: string | undefined, options?: ListOptions): Iterable<KubeObject>
  /** How many objects of a kind come after a key, at the newest version. */
  countAfter(resource: string, namespace: string | undefined, after: { namespace: string; name: string }): number
  create(resource: string, object: KubeObject): KubeObject
  update(resource: string, object: KubeObject): KubeObject
  /** Removes an object; `last` is the object as the DELETED event shows it. */
  remove(resource: string, last: KubeObject): KubeObject
  /** The objects whose ownerReferences name this uid. */
  dependents(ownerUid: string): ObjectKey[]
  /** Events of one kind after `version`, oldest first. */
  eventsSince(resource: string, namespace: string | undefined, version: number): StoredEvent[]
  subscribe(listener: (event: StoredEvent) => void): () => void
  close(): void
}

export type SqliteObjectStoreOptions = {
  /** A database file path, ":memory:", or an open database (left open by close()). */
  readonly db: string | DatabaseSync
  /** How many events watches can resume from. Kubernetes keeps roughly five minutes of etcd history. */
  readonly historyLimit?: number
  /**
   * The AES-256 key (32 bytes) core Secrets are encrypted with at rest. By default the key file
   * `<database path>.key` (created, random, with mode 0600, when missing), or a random key for an in-memory database.
   */
  readonly secretKey?: Uint8Array
}

/** Where core v1 Secrets are kept: the only kind whose bodies are encrypted at rest. */
const secretResource = storageResource(secretType)
/** Additional authenticated data of a stored body: its storage key, namespace and name (none of which holds a "/"). */
const aadOf = (resource: string, namespace: string, name: string) => `${resource}/${namespace}/${name}`

type Row = { object: string }

/**
 * Idempotent statements, run at every open, rather than migrate()'s numbered
 * steps: migrate() counts steps in `PRAGMA user_version`, one number per file,
 * and this file may also hold the secret store's tables (--secrets-sqlite-path
 * naming the same file), whose steps that number counts. A new table or index
 * is added here with IF NOT EXISTS; a change to an existing one needs a step
 * of its own, recorded in kube_counters.
 */
const schema = `
CREATE TABLE IF NOT EXISTS kube_objects (
  resource TEXT NOT NULL,
  namespace TEXT NOT NULL,
  name TEXT NOT NULL,
  uid TEXT NOT NULL UNIQUE,
  version INTEGER NOT NULL,
  object TEXT NOT NULL,
  PRIMARY KEY (resource, namespace, name)
) WITHOUT ROWID;
-- The keys alone, for a list's remainingItemCount: counting through the table walks every object's pages
-- (24 ms for 100,000 Runs, against 4 ms here). Updates do not touch it; they change no key.
CREATE INDEX IF NOT EXISTS kube_objects_keys ON kube_objects (resource, namespace, name);
CREATE TABLE IF NOT EXISTS kube_owner_refs (
  owner_uid TEXT NOT NULL,
  resource TEXT NOT NULL,
  namespace TEXT NOT NULL,
  name TEXT NOT NULL,
  PRIMARY KEY (owner_uid, resource, namespace, name)
) WITHOUT ROWID;
-- Each write replaces its object's rows here: without this index that delete read the whole table.
CREATE INDEX IF NOT EXISTS kube_owner_refs_by_dependent ON kube_owner_refs (resource, namespace, name);
CREATE TABLE IF NOT EXISTS kube_events (
  version INTEGER PRIMARY KEY,
  type TEXT NOT NULL,
  resource TEXT NOT NULL,
  namespace TEXT NOT NULL,
  name TEXT NOT NULL,
  object TEXT NOT NULL,
  previous TEXT
);
CREATE INDEX IF NOT EXISTS kube_events_by_resource ON kube_events (resource, version);
CREATE TABLE IF NOT EXISTS kube_counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
-- One row: a known text sealed with the key Secrets are encrypted with, so that a wrong key fails at open.
CREATE TABLE IF NOT EXISTS kube_key_check (id INTEGER PRIMARY KEY CHECK (id = 1), sealed TEXT NOT NULL);
`

const compareKeys = (a: { namespace: string; name: string }, b: { namespace: string; name: string }) =>
  a.namespace < b.namespace ? -1 : a.namespace > b.namespace ? 1 : a.name < b.name ? -1 : a.name > b.name ? 1 : 0

export class SqliteObjectStore implements ObjectStore {
  #db: DatabaseSync
  #ownsDb: boolean
  #historyLimit: number
  #version: number
  #compacted: number
  #listeners = new Set<(event: StoredEvent) => void>()
  #closed = false
  #statements = new Map<string, StatementSync>()
  #cipher: SecretCipher
  /** A file this store owns is checkpointed on a thread of its own (lib/sqlite/checkpointer.ts). */
  #checkpointer: Checkpointer | undefined

  constructor(options: SqliteObjectStoreOptions) {
    this.#ownsDb = typeof options.db === "string"
    // One process writes a database (see ObjectStore), so a lock held by another fails at once rather than waiting.
    this.#db =
      typeof options.db === "string"
        ? openDatabase(options.db, { what: databaseWhat, busyTimeoutMs: 0, synchronous: "NORMAL" })
        : options.db
    this.#historyLimit = options.historyLimit ?? 10_000
    try {
      this.#db.exec(schema)
      this.#version = this.#counter("version")
      this.#compacted = this.#counter("compacted")
      this.#cipher = openCipher(this.#db, options)
      this.#encryptPlaintextSecrets()
      if (typeof options.db === "string" && options.db !== ":memory:") {
        this.#db.exec(`PRAGMA wal_autocheckpoint = ${fallbackPages}`)
        const rest = this.#db.prepare("PRAGMA wal_checkpoint(PASSIVE)")
        this.#checkpointer = checkpointer(options.db, () => rest.get())
      }
    } catch (error) {
      if (this.#ownsDb) this.#db.close()
      throw error
    }
  }

  /**
   * Encrypts the Secrets of a database written before encryption at rest, in
   * place (versions unchanged). Until that has been done once for a database
   * with objects, and whenever plaintext was found, a database this store owns
   * is then rebuilt (VACUUM) and its write-ahead log emptied, so that no copy
   * of an old plaintext body (of a row since updated or deleted) stays in the
   * files; the counter `plaintext_purged` records that it was.
   */
  #encryptPlaintextSecrets() {
    const db = this.#db
    let found = 0
    transaction(db, () => {
      const objects = db
        .prepare("SELECT namespace, name, object FROM kube_objects WHERE resource = ? AND substr(object, 1, 1) = '{'")
        .all(secretResource) as { namespace: string; name: string; object: string }[]
      const updateObject = db.prepare(
        "UPDATE kube_objects SET object = ? WHERE resource = ? AND namespace = ? AND name = ?",
      )
      for (const row of objects) {
        const aad = aadOf(secretResource, row.namespace, row.name)
        updateObject.run(this.#cipher.seal(row.object, aad), secretResource, row.namespace, row.name)
        found++
      }
      const events = db
        .prepare(
          "SELECT version, namespace, name, object, previous FROM kube_events WHERE resource = ? AND (substr(object, 1, 1) = '{' OR substr(previous, 1, 1) = '{')",
        )
        .all(secretResource) as {
        version: number
        namespace: string
        name: string
        object: string
        previous: string | null
      }[]
      const updateEvent = db.prepare("UPDATE kube_events SET object = ?, previous = ? WHERE version = ?")
      for (const row of events) {
        const aad = aadOf(secretResource, row.namespace, row.name)
        const seal = (text: string) => (SecretCipher.isSealed(text) ? text : this.#cipher.seal(text, aad))
        updateEvent.run(seal(row.object), row.previous === null ? null : seal(row.previous), row.version)
        found++
      }
    })
    if (this.#ownsDb && (found > 0 || this.#counter("plaintext_purged") === 0)) {
      // A new database has nothing to purge.
      if (this.#version > 0) {
        db.exec("VACUUM")
        db.exec("PRAGMA wal_checkpoint(TRUNCATE)")
      }
      this.#sql(
        "INSERT INTO kube_counters (name, value) VALUES ('plaintext_purged', 1) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
      ).run()
    }
  }

  /** A body as stored: JSON, sealed when it is a Secret's. */
  #encode(resource: string, key: { namespace: string; name: string }, object: KubeObject): string {
    const text = JSON.stringify(object)
    return resource === secretResource ? this.#cipher.seal(text, aadOf(resource, key.namespace, key.name)) : text
  }

  /** A stored body as an object; a Secret's written before encryption at rest is read as it is. */
  #decode(resource: string, namespace: string, name: string, stored: string): KubeObject {
    let text: string
    try {
      text = this.#cipher.open(stored, aadOf(resource, namespace, name))
    } catch (error) {
      throw new Error(
        `cannot decrypt the stored ${resource} ${namespace}/${name}: it was altered, or encrypted with another key`,
        { cause: error },
      )
    }
    return JSON.parse(text)
  }

  get version() {
    return this.#version
  }

  /** Prepared once per SQL text. */
  #sql(text: string): StatementSync {
    let statement = this.#statements.get(text)
    if (statement === undefined) {
      statement = this.#db.prepare(text)
      this.#statements.set(text, statement)
    }
    return statement
  }

  get compactedVersion() {
    return this.#compacted
  }

  #counter(name: string): number {
    const row = this.#sql("SELECT value FROM kube_counters WHERE name = ?").get(name) as { value: number } | undefined
    return row?.value ?? 0
  }

  get(key: ObjectKey): KubeObject | undefined {
    const row = this.#sql("SELECT object FROM kube_objects WHERE resource = ? AND namespace = ? AND name = ?").get(
      key.resource,
      key.namespace,
      key.name,
    ) as Row | undefined
    return row === undefined ? undefined : this.#decode(key.resource, key.namespace, key.name, row.object)
  }

  getByUid(uid: string) {
    const row = this.#sql("SELECT resource, namespace, name, object FROM kube_objects WHERE uid = ?").get(uid) as
      | { resource: string; namespace: string; name: string; object: string }
      | undefined
    return row === undefined
      ? undefined
      : { resource: row.resource, object: this.#decode(row.resource, row.namespace, row.name, row.object) }
  }

  *list(resource: string, namespace: string | undefined, options: ListOptions = {}): Iterable<KubeObject> {
    const after = options.after ?? { namespace: "", name: "" }
    const undo = this.#undo(resource, namespace, options.atVersion)
    const sql =
      namespace === undefined
        ? "SELECT namespace, name, object FROM kube_objects WHERE resource = ? AND (namespace, name) > (?, ?) ORDER BY namespace, name"
        : "SELECT namespace, name, object FROM kube_objects WHERE resource = ? AND namespace = ? AND name > ? ORDER BY name"
    const parameters =
      namespace === undefined ? [resource, after.namespace, after.name] : [resource, namespace, after.name]
    // A statement of its own: a cached one could be reset by a nested call while this generator is suspended.
    const rows = this.#db.prepare(sql).iterate(...parameters) as Iterable<{
      namespace: string
      name: string
      object: string
    }>
    // Objects deleted since the snapshot's version still belong to it; merge them in key order.
    const gone = [...undo.values()]
      .filter(
        (entry) =>
          entry.object !== undefined && compareKeys(entry, after) > 0 && this.get({ resource, ...entry }) === undefined,
      )
      .sort(compareKeys)
    let next = 0
    for (const row of rows) {
      while (next < gone.length && compareKeys(gone[next] ?? row, row) < 0) {
        const object = gone[next++]?.object
        if (object !== undefined) yield object
      }
      const changed = undo.get(`${row.namespace}/${row.name}`)
      if (changed === undefined) yield this.#decode(resource, row.namespace, row.name, row.object)
      else if (changed.object !== undefined) yield changed.object
    }
    for (; next < gone.length; next++) {
      const object = gone[next]?.object
      if (object !== undefined) yield object
    }
  }

  /** For a snapshot at `version`: each key written since, with the object it had then (undefined if it did not exist). */
  #undo(resource: string, namespace: string | undefined, version: number | undefined) {
    const undo = new Map<string, { namespace: string; name: string; object: KubeObject | undefined }>()
    if (version === undefined || version >= this.#version) return undo
    if (version < this.#compacted) throw new VersionExpiredError(version, this.#compacted + 1)
    for (const event of this.eventsSince(resource, namespace, version)) {
      const key = `${event.namespace}/${event.name}`
      if (!undo.has(key)) undo.set(key, { namespace: event.namespace, name: event.name, object: event.previous })
    }
    return undo
  }

  countAfter(resource: string, namespace: string | undefined, after: { namespace: string; name: string }): number {
    const row = (
      namespace === undefined
        ? this.#sql("SELECT count(*) AS n FROM kube_objects WHERE resource = ? AND (namespace, name) > (?, ?)").get(
            resource,
            after.namespace,
            after.name,
          )
        : this.#sql("SELECT count(*) AS n FROM kube_objects WHERE resource = ? AND namespace = ? AND name > ?").get(
            resource,
            namespace,
            after.name,
          )
    ) as { n: number }
    return row.n
  }

  create(resource: string, object: KubeObject): KubeObject {
    return this.#write("ADDED", resource, object, undefined)
  }

  update(resource: string, object: KubeObject): KubeObject {
    const previous = this.get(keyOf(resource, object))
    if (previous === undefined) throw new Error(`cannot update ${resource} ${object.metadata.name}: it does not exist`)
    return this.#write("MODIFIED", resource, object, previous)
  }

  remove(resource: string, last: KubeObject): KubeObject {
    const previous = this.get(keyOf(resource, last))
    if (previous === undefined) throw new Error(`cannot remove ${resource} ${last.metadata.name}: it does not exist`)
    return this.#write("DELETED", resource, last, previous)
  }

  #write(type: EventType, resource: string, object: KubeObject, previous: KubeObject | undefined): KubeObject {
    if (this.#closed) throw new Error("the object store is closed")
    const version = this.#version + 1
    const stored: KubeObject = { ...object, metadata: { ...object.metadata, resourceVersion: String(version) } }
    const key = keyOf(resource, stored)
    const text = this.#encode(resource, key, stored)
    const compacted = version - this.#historyLimit
    transaction(this.#db, () => {
      if (type === "ADDED") {
        this.#sql(
          "INSERT INTO kube_objects (resource, namespace, name, uid, version, object) VALUES (?, ?, ?, ?, ?, ?)",
        ).run(resource, key.namespace, key.name, stored.metadata.uid ?? "", version, text)
      } else if (type === "MODIFIED") {
        this.#sql(
          "UPDATE kube_objects SET version = ?, object = ? WHERE resource = ? AND namespace = ? AND name = ?",
        ).run(version, text, resource, key.namespace, key.name)
      } else {
        this.#sql("DELETE FROM kube_objects WHERE resource = ? AND namespace = ? AND name = ?").run(
          resource,
          key.namespace,
          key.name,
        )
      }
      // Most writes (a Run's status) keep the owners: their index rows stay as they are.
      if (type !== "MODIFIED" || !sameOwners(previous, stored)) {
        this.#sql("DELETE FROM kube_owner_refs WHERE resource = ? AND namespace = ? AND name = ?").run(
          resource,
          key.namespace,
          key.name,
        )
        if (type !== "DELETED") {
          const insert = this.#sql(
            "INSERT OR IGNORE INTO kube_owner_refs (owner_uid, resource, namespace, name) VALUES (?, ?, ?, ?)",
          )
          for (const reference of stored.metadata.ownerReferences ?? [])
            insert.run(reference.uid, resource, key.namespace, key.name)
        }
      }
      this.#sql(
        "INSERT INTO kube_events (version, type, resource, namespace, name, object, previous) VALUES (?, ?, ?, ?, ?, ?, ?)",
      ).run(
        version,
        type,
        resource,
        key.namespace,
        key.name,
        text,
        previous === undefined ? null : this.#encode(resource, key, previous),
      )
      this.#sql(
        "INSERT INTO kube_counters (name, value) VALUES ('version', ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
      ).run(version)
      if (compacted > this.#compacted) {
        this.#sql("DELETE FROM kube_events WHERE version <= ?").run(compacted)
        this.#sql(
          "INSERT INTO kube_counters (name, value) VALUES ('compacted', ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        ).run(compacted)
      }
    })
    this.#version = version
    if (compacted > this.#compacted) this.#compacted = compacted
    this.#checkpointer?.committed()
    const event: StoredEvent = { type, version, ...key, object: stored, previous }
    for (const listener of [...this.#listeners]) {
      try {
        listener(event)
      } catch (error) {
        // The write is committed; a failing listener (a watch whose client vanished mid-write) must not fail it.
        process.emitWarning(
          `a listener of the embedded Kubernetes store failed: ${error instanceof Error ? error.message : String(error)}`,
        )
      }
    }
    return stored
  }

  dependents(ownerUid: string): ObjectKey[] {
    return this.#sql(
      "SELECT resource, namespace, name FROM kube_owner_refs WHERE owner_uid = ? ORDER BY resource, namespace, name",
    ).all(ownerUid) as ObjectKey[]
  }

  eventsSince(resource: string, namespace: string | undefined, version: number): StoredEvent[] {
    if (version < this.#compacted) throw new VersionExpiredError(version, this.#compacted + 1)
    const rows = (
      namespace === undefined
        ? this.#sql("SELECT * FROM kube_events WHERE resource = ? AND version > ? ORDER BY version").all(
            resource,
            version,
          )
        : this.#sql(
            "SELECT * FROM kube_events WHERE resource = ? AND namespace = ? AND version > ? ORDER BY version",
          ).all(resource, namespace, version)
    ) as {
      type: EventType
      version: number
      resource: string
      namespace: string
      name: string
      object: string
      previous: string | null
    }[]
    return rows.map((row) => ({
      type: row.type,
      version: row.version,
      resource: row.resource,
      namespace: row.namespace,
      name: row.name,
      object: this.#decode(row.resource, row.namespace, row.name, row.object),
      previous: row.previous === null ? undefined : this.#decode(row.resource, row.namespace, row.name, row.previous),
    }))
  }

  subscribe(listener: (event: StoredEvent) => void): () => void {
    this.#listeners.add(listener)
    return () => this.#listeners.delete(listener)
  }

  close(): void {
    if (this.#closed) return
    this.#closed = true
    this.#listeners.clear()
    this.#checkpointer?.close()
    if (this.#ownsDb) this.#db.close()
  }
}

export const keyOf = (resource: string, object: KubeObject): ObjectKey => ({
  resource,
  namespace: object.metadata.namespace ?? "",
  name: object.metadata.name ?? "",
})

/**
 * The cipher of a database's Secrets. The key is the one given, else the key file beside the
 * database (made when neither it nor a key check exists: a new key could not
 * read what an old one wrote), else, in memory, a random one. The key check
 * is stored if missing, then decrypted: a wrong key fails here, at open.
 */
function openCipher(db: DatabaseSync, options: SqliteObjectStoreOptions): SecretCipher {
  const location = typeof options.db === "string" ? options.db : options.db.location()
  const inMemory = location === null || location === "" || location === ":memory:"
  const readCheck = () =>
    (db.prepare("SELECT sealed FROM kube_key_check WHERE id = 1").get() as { sealed: string } | undefined)?.sealed
  const existing = readCheck()
  let key: Uint8Array
  let source: string
  if (options.secretKey !== undefined) {
    key = options.secretKey
    source = "the secretKey option"
  } else if (inMemory) {
    key = randomKey()
    source = "a random in-memory key"
  } else {
    const keyFile = `${location}.key`
    source = `the key file "${keyFile}"`
    key = keyFromFile(keyFile, keyFileWhat, {
      mayCreate: existing === undefined,
      missing: () =>
        new Error(
          `cannot open the embedded Kubernetes API database "${location}": its Secrets are encrypted with the key in "${keyFile}", and that file is missing; restore it (a new key cannot decrypt them)`,
        ),
    })
  }
  const cipher = new SecretCipher(key)
  const matches = cipher.matchesKeyCheck(existing, (fresh) =>
    // Another process may have stored one meanwhile: check against that one.
    transaction(db, () => {
      const stored = readCheck()
      if (stored !== undefined) return stored
      db.prepare("INSERT INTO kube_key_check (id, sealed) VALUES (1, ?)").run(fresh)
      return fresh
    }),
  )
  if (!matches) {
    cipher.close()
    throw new Error(
      `cannot open the embedded Kubernetes API database "${location ?? ":memory:"}": its Secrets were encrypted with another key than ${source}`,
    )
  }
  return cipher
}

/** Whether two versions of an object name the same owners, by uid, in the same order. */
function sameOwners(previous: KubeObject | undefined, next: KubeObject): boolean {
  const before = previous?.metadata.ownerReferences ?? []
  const after = next.metadata.ownerReferences ?? []
  return before.length === after.length && before.every((reference, n) => reference.uid === after[n]?.uid)
}
