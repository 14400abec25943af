import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { DatabaseSync } from "node:sqlite"
import { afterEach, describe, expect, it } from "vitest"
import type { KubeObject } from "./object-meta.ts"
import type { StoredEvent } from "./object-store.ts"
import { SqliteObjectStore, VersionExpiredError } from "./object-store.ts"

const dirs: string[] = []
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true })
})

function databasePath() {
  const dir = mkdtempSync(join(tmpdir(), "runnel-store-"))
  dirs.push(dir)
  return join(dir, "kube.db")
}

const object = (name: string, namespace = "default", extra: Partial<KubeObject> = {}): KubeObject => ({
  apiVersion: "v1",
  kind: "Thing",
  metadata: { name, namespace, uid: `uid-${namespace}-${name}` },
  ...extra,
})

describe("SQLite object store", () => {
  it("finds an object's owner references by index, so a write costs the same with 100k owned objects", () => {
    const dir = mkdtempSync(join(tmpdir(), "runnel-object-store-plan-"))
    const path = join(dir, "kube.db")
    new SqliteObjectStore({ db: path }).close()
    const db = new DatabaseSync(path)
    try {
      const plan = db
        .prepare("EXPLAIN QUERY PLAN DELETE FROM kube_owner_refs WHERE resource = ? AND namespace = ? AND name = ?")
        .all("runs", "default", "x")
        .map((row) => String(row.detail))
      expect(plan.join("\n")).toMatch(/USING (COVERING )?INDEX kube_owner_refs_by_dependent/)
    } finally {
      db.close()
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it("gives every write the next version, across kinds, and tells subscribers after commit", () => {
    const store = new SqliteObjectStore({ db: ":memory:" })
    const seen: StoredEvent[] = []
    store.subscribe((event) => seen.push(event))
    const a = store.create("g/things", object("a"))
    const b = store.create("g/others", object("b"))
    const a2 = store.update("g/things", { ...a, spec: 1 })
    store.remove("g/things", a2)
    expect([a, b, a2].map((item) => item.metadata.resourceVersion)).toEqual(["1", "2", "3"])
    expect(seen.map((event) => `${event.type} ${event.name} ${event.version}`)).toEqual([
      "ADDED a 1",
      "ADDED b 2",
      "MODIFIED a 3",
      "DELETED a 4",
    ])
    expect(seen[2]?.previous?.metadata.resourceVersion).toBe("1")
    expect(store.version).toBe(4)
    store.close()
  })

  it("lists in key order across namespaces and as a snapshot of an earlier version", () => {
    const store = new SqliteObjectStore({ db: ":memory:" })
    for (const [name, namespace] of [
      ["b", "ns"],
      ["a", "ns"],
      ["c", "ns-x"],
      ["z", "n"],
    ] as const)
      store.create("r", object(name, namespace))
    const names = (options = {}) =>
      [...store.list("r", undefined, options)].map((item) => `${item.metadata.namespace}/${item.metadata.name}`)
    expect(names()).toEqual(["n/z", "ns/a", "ns/b", "ns-x/c"])
    const snapshot = store.version
    store.remove("r", object("a", "ns"))
    store.update("r", { ...object("b", "ns"), changed: true })
    store.create("r", object("d", "ns"))
    expect(names({ atVersion: snapshot })).toEqual(["n/z", "ns/a", "ns/b", "ns-x/c"])
    expect([...store.list("r", "ns", { atVersion: snapshot })].map((item) => item.changed)).toEqual([
      undefined,
      undefined,
    ])
    expect(names({ atVersion: snapshot, after: { namespace: "ns", name: "a" } })).toEqual(["ns/b", "ns-x/c"])
    expect(names()).toEqual(["n/z", "ns/b", "ns/d", "ns-x/c"])
    store.close()
  })

  it("keeps a bounded history and refuses reads from before it", () => {
    const store = new SqliteObjectStore({ db: ":memory:", historyLimit: 3 })
    for (let index = 0; index < 6; index++) store.create("r", object(`o${index}`))
    expect(store.compactedVersion).toBe(3)
    expect(store.eventsSince("r", undefined, 3).map((event) => event.version)).toEqual([4, 5, 6])
    expect(() => store.eventsSince("r", undefined, 2)).toThrow(VersionExpiredError)
    expect(() => [...store.list("r", undefined, { atVersion: 1 })]).toThrow("too old resource version: 1 (4)")
    store.close()
  })

  it("continues its version and history after a restart", () => {
    const path = databasePath()
    const first = new SqliteObjectStore({ db: path })
    first.create(
      "r",
      object("a", "default", {
        metadata: {
          name: "a",
          namespace: "default",
          uid: "u1",
          ownerReferences: [{ apiVersion: "v1", kind: "Owner", name: "o", uid: "owner" }],
        },
      }),
    )
    first.close()
    const second = new SqliteObjectStore({ db: path })
    expect(second.version).toBe(1)
    expect(second.get({ resource: "r", namespace: "default", name: "a" })?.metadata.resourceVersion).toBe("1")
    expect(second.getByUid("u1")?.resource).toBe("r")
    expect(second.dependents("owner")).toEqual([{ resource: "r", namespace: "default", name: "a" }])
    expect(second.create("r", object("b")).metadata.resourceVersion).toBe("2")
    expect(second.eventsSince("r", "default", 0).map((event) => event.name)).toEqual(["a", "b"])
    second.close()
  })
})
