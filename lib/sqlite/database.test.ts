import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { DatabaseSync } from "node:sqlite"
import { describe, expect, it, onTestFinished } from "vitest"
import { SystemError } from "../core/errors.ts"
import { migrate, openDatabase, transaction } from "./database.ts"

function tempFile(): string {
  const dir = mkdtempSync(join(tmpdir(), "runnel-sqlite-"))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  return join(dir, "test.db")
}

function open(path = tempFile(), synchronous: "NORMAL" | "FULL" = "NORMAL"): DatabaseSync {
  const db = openDatabase(path, { what: "the test store", busyTimeoutMs: 1000, synchronous })
  onTestFinished(() => {
    if (db.isOpen) db.close()
  })
  return db
}

const pragma = (db: DatabaseSync, name: string) => db.prepare(`PRAGMA ${name}`).get()?.[name]
const names = (db: DatabaseSync) =>
  db
    .prepare("SELECT name FROM t ORDER BY name")
    .all()
    .map((row) => row.name)

describe("openDatabase", () => {
  it("opens a file in WAL mode with the synchronous level asked for", () => {
    const path = tempFile()
    expect(pragma(open(path, "NORMAL"), "journal_mode")).toBe("wal")
    expect(pragma(open(path, "NORMAL"), "synchronous")).toBe(1)
    expect(pragma(open(path, "FULL"), "synchronous")).toBe(2)
  })

  it("names the file it cannot open", () => {
    const path = join(tempFile(), "missing-dir", "x.db")
    const error = (() => {
      try {
        return open(path)
      } catch (error) {
        return error
      }
    })()
    expect(error).toBeInstanceOf(SystemError)
    expect((error as Error).message).toMatch(new RegExp(`^cannot open the test store "${path}": `))
  })

  it("refuses a file that is not a database, naming it", () => {
    const path = tempFile()
    writeFileSync(path, "not a database, just text that is long enough to hold a header ".repeat(20))
    expect(() => open(path)).toThrow(`cannot open the test store "${path}": file is not a database`)
  })
})

describe("migrate", () => {
  const steps = ["CREATE TABLE t (name TEXT)", "INSERT INTO t VALUES ('first')", "INSERT INTO t VALUES ('second')"]

  it("runs each step once, counting them in user_version", () => {
    const path = tempFile()
    const db = open(path)
    migrate(db, steps.slice(0, 2))
    expect(pragma(db, "user_version")).toBe(2)
    migrate(db, steps.slice(0, 2))
    migrate(db, steps)
    migrate(db, steps)
    expect(pragma(db, "user_version")).toBe(3)
    expect(names(db)).toEqual(["first", "second"])
  })

  it("applies no step of a batch where one fails", () => {
    const db = open()
    migrate(db, steps.slice(0, 1))
    expect(() => migrate(db, [...steps, "NOT SQL"])).toThrow()
    expect(pragma(db, "user_version")).toBe(1)
    expect(names(db)).toEqual([])
  })

  it("leaves a second connection nothing to run once the first has migrated", () => {
    const path = tempFile()
    const [one, two] = [open(path), open(path)]
    migrate(one, steps)
    migrate(two, steps)
    expect(names(two)).toEqual(["first", "second"])
  })
})

describe("transaction", () => {
  it("commits what the work wrote and returns its result", () => {
    const db = open()
    db.exec("CREATE TABLE t (name TEXT)")
    expect(transaction(db, () => db.prepare("INSERT INTO t VALUES ('kept')").run().changes)).toBe(1)
    expect(db.isTransaction).toBe(false)
    expect(names(db)).toEqual(["kept"])
  })

  it("rolls back when the work throws, and rethrows its error", () => {
    const db = open()
    db.exec("CREATE TABLE t (name TEXT)")
    const failure = new Error("work failed")
    expect(() =>
      transaction(db, () => {
        db.exec("INSERT INTO t VALUES ('dropped')")
        throw failure
      }),
    ).toThrow(failure)
    expect(db.isTransaction).toBe(false)
    expect(names(db)).toEqual([])
  })

  it("takes the write lock at its start, so another connection waits or fails instead of interleaving", () => {
    const path = tempFile()
    const one = open(path)
    const two = openDatabase(path, { what: "the test store", busyTimeoutMs: 0, synchronous: "NORMAL" })
    onTestFinished(() => two.close())
    one.exec("CREATE TABLE t (name TEXT)")
    transaction(one, () => {
      expect(() => transaction(two, () => two.exec("INSERT INTO t VALUES ('second')"))).toThrow(/locked/)
      one.exec("INSERT INTO t VALUES ('first')")
    })
    expect(names(two)).toEqual(["first"])
  })
})
