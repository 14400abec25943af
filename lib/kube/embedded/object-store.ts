import type { StatementSync } from "node:sqlite"
import { DatabaseSync } from "node:sqlite"
import type { KubeObject } from "./object-meta.ts"

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
}

type Row = { object: string }

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
CREATE TABLE IF NOT EXISTS kube_owner_refs (
  owner_uid TEXT NOT NULL,
  resource TEXT NOT NULL,
  namespace TEXT NOT NULL,
  name TEXT NOT NULL,
  PRIMARY KEY (owner_uid, resource, namespace, name)
) WITHOUT ROWID;
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

  constructor(options: SqliteObjectStoreOptions) {
    this.#ownsDb = typeof options.db === "string"
    this.#db = typeof options.db === "string" ? new DatabaseSync(options.db) : options.db
    this.#historyLimit = options.historyLimit ?? 10_000
    if (this.#ownsDb) {
      this.#db.exec("PRAGMA journal_mode = WAL")
      this.#db.exec("PRAGMA synchronous = NORMAL")
    }
    this.#db.exec(schema)
    this.#version = this.#counter("version")
    this.#compacted = this.#counter("compacted")
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
    return row === undefined ? undefined : JSON.parse(row.object)
  }

  getByUid(uid: string) {
    const row = this.#sql("SELECT resource, object FROM kube_objects WHERE uid = ?").get(uid) as
      | { resource: string; object: string }
      | undefined
    return row === undefined ? undefined : { resource: row.resource, object: JSON.parse(row.object) as KubeObject }
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
      if (changed === undefined) yield JSON.parse(row.object)
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
    const text = JSON.stringify(stored)
    const db = this.#db
    db.exec("BEGIN IMMEDIATE")
    try {
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
      this.#sql(
        "INSERT INTO kube_events (version, type, resource, namespace, name, object, previous) VALUES (?, ?, ?, ?, ?, ?, ?)",
      ).run(
        version,
        type,
        resource,
        key.namespace,
        key.name,
        text,
        previous === undefined ? null : JSON.stringify(previous),
      )
      this.#sql(
        "INSERT INTO kube_counters (name, value) VALUES ('version', ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
      ).run(version)
      const compacted = version - this.#historyLimit
      if (compacted > this.#compacted) {
        this.#sql("DELETE FROM kube_events WHERE version <= ?").run(compacted)
        this.#sql(
          "INSERT INTO kube_counters (name, value) VALUES ('compacted', ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        ).run(compacted)
      }
      db.exec("COMMIT")
      this.#version = version
      if (compacted > this.#compacted) this.#compacted = compacted
    } catch (error) {
      db.exec("ROLLBACK")
      throw error
    }
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
      object: JSON.parse(row.object),
      previous: row.previous === null ? undefined : JSON.parse(row.previous),
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
    if (this.#ownsDb) this.#db.close()
  }
}

export const keyOf = (resource: string, object: KubeObject): ObjectKey => ({
  resource,
  namespace: object.metadata.namespace ?? "",
  name: object.metadata.name ?? "",
})
