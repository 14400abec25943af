import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { DatabaseSync } from "node:sqlite"
import { describe, expect, it, onTestFinished, vi } from "vitest"
import type { TaskRecord } from "../core/run.ts"
import type { LogStore, SearchRequest } from "./log-store.ts"
import { openSqliteLogStore } from "./sqlite-log-store.ts"

function tempFile(): string {
  const dir = mkdtempSync(join(tmpdir(), "runnel-logs-"))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  return join(dir, "logs.db")
}

async function open(path: string): Promise<LogStore> {
  const store = await openSqliteLogStore(path)
  onTestFinished(() => store.close())
  return store
}

/** The hits of a search, as a list. */
const hits = async (store: LogStore, query: string, options: Omit<SearchRequest, "query"> = {}) =>
  (await store.search({ query, ...options })).hits

const nextTurn = () => new Promise((resolve) => setImmediate(resolve))

function task(runId: string, path: string, overrides: Partial<TaskRecord> = {}): TaskRecord {
  return {
    runId,
    path,
    name: path.split("/").at(-1) ?? path,
    status: "running",
    code: null,
    startedAt: "2026-01-01T00:00:00.000Z",
    endedAt: null,
    ...overrides,
  }
}

for (const kind of ["file", ":memory:"] as const) {
  const openStore = () => open(kind === "file" ? tempFile() : ":memory:")

  describe(`SQLite log store (${kind})`, () => {
    it("returns nothing for an unknown run or task", async () => {
      const store = await openStore()
      expect(store.tasks("missing")).toEqual([])
      expect(store.output("missing", "tasks/1/x", "stdout")).toBe("")
      expect(await hits(store, "anything", { runIds: ["missing"] })).toEqual([])
      expect(await store.outputPage("missing", "tasks/1/x", "stdout", 0, 10)).toEqual({ text: "", total: 0 })
    })

    it("counts the UTF-8 bytes stored after a cursor, up to a number of rows", async () => {
      const store = await openStore()
      store.append("r1", "tasks/1/a", "stdout", "héllo\n")
      store.append("r2", "tasks/1/a", "stdout", "other run\n")
      const [first] = store.readChunks("r1", 0)
      store.append("r1", "tasks/1/a", "stderr", "€\n")
      expect(store.readChunks("r1", 0).map((chunk) => chunk.text)).toEqual(["héllo\n", "€\n"])
      expect(store.bytesAfter("r1", 0, 100)).toBe(7 + 4)
      expect(store.bytesAfter("r1", first?.id ?? 0, 100)).toBe(4)
      expect(store.bytesAfter("r1", 0, 1)).toBe(7)
      expect(store.bytesAfter("missing", 0, 100)).toBe(0)
      expect(store.lastChunkId("r1")).toBe(store.readChunks("r1", 0).at(-1)?.id)
      expect(store.lastChunkId("missing")).toBe(0)
      expect(store.lostOutput("r1")).toBeUndefined()
    })

    it("keeps attachments of a run, the last one of a name winning, and answers undefined for others", async () => {
      const store = await openStore()
      const body = "x".repeat(600 * 1024)
      store.attach("r1", "webhook-body", "first")
      store.attach("r1", "webhook-body", body)
      expect(store.attachment("r1", "webhook-body")).toBe(body)
      expect(store.attachment("r1", "other")).toBeUndefined()
      expect(store.attachment("r2", "webhook-body")).toBeUndefined()
    })

    it("gives back task records and output as they were saved", async () => {
      const store = await openStore()
      const build = task("r1", "tasks/1/build")
      store.saveTask(build)
      store.append("r1", "tasks/1/build", "stdout", "compiling\n")
      store.append("r1", "tasks/1/build", "stderr", "warning: unused\n")
      store.append("r1", "tasks/1/build", "stdout", "done ✓\n")
      const finished = { ...build, status: "success", code: 0, endedAt: "2026-01-01T00:00:05.000Z" } as const
      store.saveTask(finished)
      expect(store.tasks("r1")).toEqual([finished])
      expect(store.output("r1", "tasks/1/build", "stdout")).toBe("compiling\ndone ✓\n")
      expect(store.output("r1", "tasks/1/build", "stderr")).toBe("warning: unused\n")
    })

    it("lists tasks in the order they were first saved, even when an earlier one is saved again", async () => {
      const store = await openStore()
      store.saveTask(task("r1", "tasks/1/lint"))
      store.saveTask(task("r1", "tasks/2/test"))
      store.saveTask(task("r2", "tasks/1/other"))
      store.saveTask(task("r1", "tasks/3/build"))
      store.saveTask(task("r1", "tasks/1/lint", { status: "failure", code: 1 }))
      expect(store.tasks("r1").map((record) => [record.path, record.status])).toEqual([
        ["tasks/1/lint", "failure"],
        ["tasks/2/test", "running"],
        ["tasks/3/build", "running"],
      ])
    })

    it("keeps the order of thousands of appends to interleaved streams", async () => {
      const store = await openStore()
      const expected = new Map<string, string>()
      const paths = ["tasks/1/a", "tasks/2/b", "tasks/3/c"]
      for (let i = 0; i < 3000; i++) {
        const path = paths[i % 3] ?? ""
        const stream = i % 7 === 0 ? "stderr" : "stdout"
        // Mostly a few bytes, sometimes past a row; some with line ends and some without.
        const text = `${i}:${"x".repeat(i % 10 === 0 ? (i * 7919) % 40_000 : i % 50)}${i % 5 === 0 ? "\n" : ""}`
        store.append("r1", path, stream, text)
        expected.set(`${path} ${stream}`, (expected.get(`${path} ${stream}`) ?? "") + text)
        if (i % 50 === 0) await nextTurn()
      }
      for (const [key, text] of expected) {
        const [path = "", stream = ""] = key.split(" ")
        expect(store.output("r1", path, stream as "stdout" | "stderr") === text).toBe(true)
      }
    })

    it("forgets a run: its tasks, output, attachments and search hits go, other runs' stay", async () => {
      const store = await openStore()
      for (const run of ["gone", "kept"]) {
        store.saveTask(task(run, "tasks/1/build"))
        store.append(run, "tasks/1/build", "stdout", `indexed words of ${run}\n`)
        store.attach(run, "webhook-body", "{}")
      }
      await store.flush()
      // Output written after the index caught up goes too, indexed or not.
      store.append("gone", "tasks/1/build", "stdout", "late words\n")
      store.forget("gone")
      await store.flush()
      expect(store.tasks("gone")).toEqual([])
      expect(store.output("gone", "tasks/1/build", "stdout")).toBe("")
      expect(store.attachment("gone", "webhook-body")).toBeUndefined()
      expect((await hits(store, "words")).map((hit) => hit.runId)).toEqual(["kept"])
      expect(await hits(store, "late")).toEqual([])
      expect(store.output("kept", "tasks/1/build", "stdout")).toBe("indexed words of kept\n")
      expect(store.attachment("kept", "webhook-body")).toBe("{}")
    })

    it("finds words after flush(), best match first, with a snippet, a page at a time", async () => {
      const store = await openStore()
      store.append("r1", "tasks/1/build", "stdout", "step one\nerror: disk quota exceeded\n")
      store.append("r2", "tasks/1/test", "stderr", "fatal error: cannot connect, error error\n")
      await nextTurn()
      store.append("r2", "tasks/2/deploy", "stdout", "all good here\n")
      await store.flush()
      expect(await store.search({ query: "error" })).toEqual({
        hits: [
          { runId: "r2", path: "tasks/1/test", stream: "stderr", snippet: expect.stringContaining("«error»") },
          { runId: "r1", path: "tasks/1/build", stream: "stdout", snippet: expect.stringContaining("«error»") },
        ],
        hasMore: false,
      })
      expect(await store.search({ query: "error", limit: 1 })).toMatchObject({ hits: [{ runId: "r2" }], hasMore: true })
      expect(await store.search({ query: "error", limit: 1, offset: 1 })).toMatchObject({
        hits: [{ runId: "r1" }],
        hasMore: false,
      })
      expect((await hits(store, "error", { runIds: ["r1"] })).map((hit) => hit.path)).toEqual(["tasks/1/build"])
      expect((await hits(store, "error", { runIds: ["r1", "r3"] })).map((hit) => hit.path)).toEqual(["tasks/1/build"])
      expect((await hits(store, "error", { exceptRunIds: ["r2"] })).map((hit) => hit.runId)).toEqual(["r1"])
      expect((await hits(store, "disk quota")).map((hit) => hit.runId)).toEqual(["r1"])
      expect(await hits(store, "disk connect")).toEqual([])
      expect(await hits(store, "nowhere")).toEqual([])
    })

    it("cuts a snippet around the place where most of the words occur, marking each, in a long row", async () => {
      const store = await openStore()
      const line = (n: number) => `2026-01-01T00:00:${n % 60} [INFO] compiling module ${n}\n`
      const before = Array.from({ length: 100 }, (_, n) => line(n)).join("")
      store.append("r1", "tasks/1/build", "stdout", `${before}disk ok\n${before}error: disk quota exceeded\n${before}`)
      store.append("r2", "tasks/1/build", "stdout", "le café est prêt\n")
      await store.flush()
      const [common] = await hits(store, "info")
      expect(common?.snippet).toMatch(/^2026-01-01T00:00:0 \[«INFO»\] compiling module 0\n.*…$/s)
      expect(common?.snippet.length).toBeLessThan(200)
      const [two] = await hits(store, "QUOTA disk")
      expect(two?.snippet).toMatch(/^….*error: «disk» «quota» exceeded\n.*…$/s)
      // FTS5 folds diacritics, so "cafe" finds "café"; its own snippet marks it.
      expect((await hits(store, "cafe")).map((hit) => hit.snippet)).toEqual(["le «café» est prêt\n"])
    })

    it("answers a word in more than 1,000 rows newest first, and pages past the first 1,000", async () => {
      const store = await openStore()
      for (let n = 0; n < 1_050; n++) store.append(`r${n}`, "tasks/1/log", "stdout", `common word in run ${n}\n`)
      await store.flush()
      const first = await store.search({ query: "common", limit: 3 })
      expect(first.hits.map((hit) => hit.runId)).toEqual(["r1049", "r1048", "r1047"])
      expect(first.hasMore).toBe(true)
      const deep = await store.search({ query: "common", limit: 20, offset: 1_040 })
      expect(deep.hits.map((hit) => hit.runId)).toEqual(Array.from({ length: 10 }, (_, i) => `r${9 - i}`))
      expect(deep.hasMore).toBe(false)
    })

    it("pages one stream of a task in characters, and gives its total", async () => {
      const store = await openStore()
      const text = Array.from({ length: 5000 }, (_, i) => `line ${i} é✓\n`).join("")
      for (let at = 0; at < text.length; at += 777)
        store.append("r1", "tasks/1/long", "stdout", text.slice(at, at + 777))
      let read = ""
      for (let offset = 0; offset < text.length; offset += 10_000) {
        const page = await store.outputPage("r1", "tasks/1/long", "stdout", offset, 10_000)
        expect(page.total).toBe(text.length)
        read += page.text
      }
      expect(read === text).toBe(true)
      expect(await store.outputPage("r1", "tasks/1/long", "stdout", text.length, 10)).toEqual({
        text: "",
        total: text.length,
      })
    })

    it("keeps characters whole when a long line without line ends is cut into rows", async () => {
      const store = await openStore()
      // 1, 2, 3 and 4 UTF-8 bytes a character, so that a row's byte limit falls inside one of most kinds.
      const text = `${"aé✓😀".repeat(20_000)} needle ${"é✓😀a".repeat(20_000)}`
      // Pieces end between characters, as the task log's decoder hands them on.
      for (let at = 0; at < text.length; at += 4000)
        store.append("r1", "tasks/1/wide", "stdout", text.slice(at, at + 4000))
      store.append("r1", "tasks/1/wide", "stderr", text)
      expect(store.output("r1", "tasks/1/wide", "stdout") === text).toBe(true)
      expect(store.output("r1", "tasks/1/wide", "stderr") === text).toBe(true)
      const chunks = store.readChunks("r1", 0)
      expect(chunks.length).toBeGreaterThan(2)
      expect(chunks.every((chunk) => !chunk.text.includes("\ufffd"))).toBe(true)
      await store.flush()
      expect((await hits(store, "needle")).map((hit) => hit.stream).sort()).toEqual(["stderr", "stdout"])
    })

    it("finds a word that two appends split between them", async () => {
      const store = await openStore()
      store.append("r1", "tasks/1/build", "stdout", "linking liba")
      store.append("r1", "tasks/1/build", "stdout", "rchive.so\n")
      await store.flush()
      expect((await hits(store, "libarchive")).map((hit) => hit.path)).toEqual(["tasks/1/build"])
    })

    it("treats query syntax as words: no query is an error, one without words finds nothing", async () => {
      const store = await openStore()
      store.append("r1", "tasks/1/build", "stdout", "some output of build AND deploy\n")
      await store.flush()
      for (const query of [
        '"unterminated',
        "AND",
        "build AND (",
        "nosuchcolumn:word",
        "* ^ NEAR(",
        "'; DROP TABLE chunks; --",
      ]) {
        await expect(store.search({ query }), query).resolves.toMatchObject({ hasMore: false })
      }
      expect((await hits(store, "build AND (")).map((hit) => hit.runId)).toEqual(["r1"])
      expect((await hits(store, "nosuchcolumn:output")).map((hit) => hit.runId)).toEqual([])
      expect(await hits(store, "!!! ((( ***")).toEqual([])
      expect(store.output("r1", "tasks/1/build", "stdout")).toBe("some output of build AND deploy\n")
    })

    it("reads a run's output after a cursor, in storage order across tasks, each chunk once", async () => {
      const store = await openStore()
      expect(store.readChunks("missing", 0)).toEqual([])
      store.append("r1", "tasks/1/a", "stdout", "a1\n")
      store.append("other", "tasks/1/a", "stdout", "not mine\n")
      await nextTurn()
      store.append("r1", "tasks/2/b", "stderr", "b1\n")
      await nextTurn()
      store.append("r1", "tasks/1/a", "stdout", "a2\n")
      // Unsent appends are read too: a read sees every write made before it.
      const first = store.readChunks("r1", 0)
      expect(first.map(({ path, stream, text }) => [path, stream, text])).toEqual([
        ["tasks/1/a", "stdout", "a1\n"],
        ["tasks/2/b", "stderr", "b1\n"],
        ["tasks/1/a", "stdout", "a2\n"],
      ])
      const ids = first.map((chunk) => chunk.id)
      expect([...ids].sort((a, b) => a - b)).toEqual(ids)
      expect(new Set(ids).size).toBe(3)
      const cursor = ids[1] ?? 0
      expect(store.readChunks("r1", cursor).map((chunk) => chunk.text)).toEqual(["a2\n"])
      expect(store.readChunks("r1", ids[2] ?? 0)).toEqual([])
      expect(store.readChunks("r1", 0, 2).map((chunk) => chunk.text)).toEqual(["a1\n", "b1\n"])
      store.append("r1", "pipeline/console", "stdout", "later\n")
      expect(store.readChunks("r1", ids[2] ?? 0).map((chunk) => chunk.text)).toEqual(["later\n"])
    })

    it("gives a follower reading by cursor all of a stream that is still being written, once", async () => {
      const store = await openStore()
      let cursor = 0
      let read = ""
      for (let i = 0; i < 2_000; i++) {
        store.append("r1", "tasks/1/a", "stdout", `line ${i}\n`)
        if (i % 7 === 0) await nextTurn()
        if (i % 13 === 0) {
          for (const chunk of store.readChunks("r1", cursor, 3)) {
            read += chunk.text
            cursor = chunk.id
          }
        }
      }
      for (
        let chunks = store.readChunks("r1", cursor, 3);
        chunks.length > 0;
        chunks = store.readChunks("r1", cursor, 3)
      ) {
        for (const chunk of chunks) {
          read += chunk.text
          cursor = chunk.id
        }
      }
      expect(read).toBe(Array.from({ length: 2_000 }, (_, i) => `line ${i}\n`).join(""))
    })

    it("closes idempotently and refuses writes afterwards", async () => {
      const store = await openStore()
      store.append("r1", "tasks/1/build", "stdout", "text\n")
      await Promise.all([store.close(), store.close()])
      await store.close()
      expect(() => store.append("r1", "tasks/1/build", "stdout", "more")).toThrow("the log store is closed")
    })
  })
}

describe("SQLite log store file", () => {
  it("names the file it cannot open", async () => {
    const path = join(tempFile(), "missing-dir", "logs.db")
    await expect(openSqliteLogStore(path)).rejects.toThrow(`cannot open the log store "${path}"`)
  })

  it("keeps its data when reopened and does not run its migrations again", async () => {
    const path = tempFile()
    const first = await openSqliteLogStore(path)
    first.saveTask(task("r1", "tasks/1/build"))
    first.append("r1", "tasks/1/build", "stdout", "persisted words\n")
    await first.close()
    const version = () => {
      const db = new DatabaseSync(path)
      try {
        return db.prepare("PRAGMA user_version").get()?.user_version
      } finally {
        db.close()
      }
    }
    const migrated = version()
    expect(migrated).toBeGreaterThan(0)

    const second = await open(path)
    expect(version()).toBe(migrated)
    expect(second.tasks("r1")).toEqual([task("r1", "tasks/1/build")])
    expect(second.output("r1", "tasks/1/build", "stdout")).toBe("persisted words\n")
    expect((await hits(second, "persisted")).map((hit) => hit.runId)).toEqual(["r1"])
  })

  it("indexes output that never pauses within about a second, not only once it stops", async () => {
    const store = await open(tempFile())
    store.append("busy", "tasks/1/noisy", "stdout", "needle in the stream\n")
    const started = performance.now()
    let foundAfterMs: number | undefined
    // Output every 20 ms, never a 250 ms pause, for up to 8 s; the needle must be found while it goes on.
    for (let i = 0; performance.now() - started < 8_000 && foundAfterMs === undefined; i++) {
      store.append("busy", "tasks/1/noisy", "stdout", `line ${i} of hay\n`)
      await new Promise((resolve) => setTimeout(resolve, 20))
      if (i % 5 === 0 && (await hits(store, "needle")).length > 0) foundAfterMs = performance.now() - started
    }
    expect(foundAfterMs).toBeDefined()
    expect(foundAfterMs).toBeLessThan(5_000)
  })

  it("is shared by two stores on one file, as two processes would", async () => {
    const path = tempFile()
    const [one, two] = await Promise.all([open(path), open(path)])
    for (let i = 0; i < 200; i++) {
      one.append("from-one", "tasks/1/a", "stdout", `one line ${i} alpha\n`)
      two.append("from-two", "tasks/1/b", "stdout", `two line ${i} bravo\n`)
      if (i % 10 === 0) await nextTurn()
    }
    one.saveTask(task("from-one", "tasks/1/a"))
    two.saveTask(task("from-two", "tasks/1/b"))
    await Promise.all([one.flush(), two.flush()])
    const expected = Array.from({ length: 200 }, (_, i) => `two line ${i} bravo\n`).join("")
    expect(one.output("from-two", "tasks/1/b", "stdout")).toBe(expected)
    expect(one.tasks("from-two")).toEqual([task("from-two", "tasks/1/b")])
    expect((await hits(one, "bravo", { limit: 1 })).map((hit) => hit.runId)).toEqual(["from-two"])
    expect((await hits(two, "alpha", { limit: 1 })).map((hit) => hit.runId)).toEqual(["from-one"])
  })

  it("lets a second store on the file follow by cursor what the first commits", async () => {
    const path = tempFile()
    const [writer, reader] = await Promise.all([open(path), open(path)])
    let cursor = 0
    let read = ""
    const follow = () => {
      for (const chunk of reader.readChunks("r1", cursor)) {
        read += chunk.text
        cursor = chunk.id
      }
    }
    for (let i = 0; i < 500; i++) {
      writer.append("r1", i % 2 === 0 ? "tasks/1/a" : "tasks/2/b", "stdout", `line ${i}\n`)
      if (i % 10 === 0) {
        await nextTurn()
        follow()
      }
    }
    await writer.flush()
    follow()
    expect(read).toBe(Array.from({ length: 500 }, (_, i) => `line ${i}\n`).join(""))
  })

  it("indexes output that an earlier process stored but did not index", async () => {
    const path = tempFile()
    await (await openSqliteLogStore(path)).close()
    const db = new DatabaseSync(path)
    db.prepare("INSERT INTO chunks (run_id, path, stream, text) VALUES (?, ?, ?, ?)").run(
      "r1",
      "tasks/1/build",
      "stdout",
      "left behind unindexed\n",
    )
    db.close()
    const store = await open(path)
    await vi.waitFor(async () => expect((await hits(store, "unindexed")).map((hit) => hit.runId)).toEqual(["r1"]))
  })

  // 256 MB rather than 1 GB: close() waits for the index, which takes ≈10 s per 256 MB on this machine.
  it("keeps RSS growth under 64 MiB while 256 MB is appended in 16 KiB chunks and indexed", async () => {
    const store = await open(tempFile())
    // Varied words, so that the index does real work; 64 distinct chunks reused, so the test itself allocates little.
    const words = Array.from({ length: 4000 }, (_, i) => `w${(i * 2654435761) % 1_000_003}`)
    const chunks = Array.from({ length: 64 }, (_, c) => {
      let text = ""
      for (let i = 0; text.length < 16_384; i++) {
        text += `${words[(c * 131 + i * 17) % words.length]} ${i % 9 ? "" : "\n"}`
      }
      return text.slice(0, 16_384)
    })
    // From after opening: the writer thread's own start (≈16 MiB) does not grow with the output.
    const before = process.memoryUsage().rss
    let peak = before
    const sampler = setInterval(() => {
      peak = Math.max(peak, process.memoryUsage().rss)
    }, 20)
    onTestFinished(() => clearInterval(sampler))
    for (let i = 0; i < Math.ceil(256e6 / 16_384); i++) {
      store.append("big", "tasks/1/flood", "stdout", chunks[i % chunks.length] ?? "")
      if (i % 8 === 7) await nextTurn()
    }
    await store.flush()
    clearInterval(sampler)
    expect((peak - before) / 2 ** 20).toBeLessThan(64)
    expect(await hits(store, words[17] ?? "", { runIds: ["big"], limit: 1 })).toHaveLength(1)
    // What is asserted is memory, not time: ≈30 s alone, far longer on two cores shared with other suites.
  }, 240_000)
})
