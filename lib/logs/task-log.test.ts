import { describe, expect, it } from "vitest"
import type { OutputStream } from "../core/run.ts"
import type { LogStore } from "./log-store.ts"
import { Redactor } from "./redactor.ts"
import { taskLog } from "./task-log.ts"

const mask = "***REDACTED***"

/** A store that records each append, so tests can see every piece of text that reached it. */
function recordingStore() {
  const appended: { stream: OutputStream; text: string }[] = []
  const store: LogStore = {
    saveTask() {},
    append: (_runId, _path, stream, text) => void appended.push({ stream, text }),
    tasks: () => [],
    output: (_runId, _path, stream) =>
      appended
        .filter((entry) => entry.stream === stream)
        .map((entry) => entry.text)
        .join(""),
    readChunks: () => [],
    search: async () => ({ hits: [], hasMore: false }),
    outputPage: async () => ({ text: "", total: 0 }),
    attach() {},
    attachment: () => undefined,
    lostOutput: () => undefined,
    forget: () => {},
    bytesAfter: () => 0,
    lastChunkId: () => 0,
    commit() {},
    flush: async () => {},
    close: async () => {},
  }
  return { store, appended }
}

function sink(options: { secrets?: string[]; keepChars?: number } = {}) {
  const { store, appended } = recordingStore()
  const live: { stream: OutputStream; text: string }[] = []
  const log = taskLog({
    runId: "r1",
    path: "tasks/1/build",
    store,
    redactor: new Redactor(options.secrets ?? []),
    keepChars: options.keepChars ?? 1 << 20,
    onText: (stream, text) => live.push({ stream, text }),
  })
  return { log, store, appended, live }
}

describe("taskLog", () => {
  it("stores, publishes and returns each stream's output", () => {
    const { log, store, live } = sink()
    log.stdout(Buffer.from("building\n"))
    log.stderr(Buffer.from("warning: deprecated\n"))
    log.stdout("done\n")
    expect(log.end()).toEqual({ stdout: "building\ndone\n", stderr: "warning: deprecated\n" })
    expect(store.output("r1", "tasks/1/build", "stdout")).toBe("building\ndone\n")
    expect(store.output("r1", "tasks/1/build", "stderr")).toBe("warning: deprecated\n")
    expect(live).toEqual([
      { stream: "stdout", text: "building\n" },
      { stream: "stderr", text: "warning: deprecated\n" },
      { stream: "stdout", text: "done\n" },
    ])
  })

  it("redacts a secret cut between Buffers at every byte, even inside a multi-byte character", () => {
    const secret = "pässwörd-✓-🔑"
    const bytes = Buffer.from(`token ${secret} and ${secret}!\n`)
    for (let cut = 0; cut <= bytes.length; cut++) {
      const { log, appended, live } = sink({ secrets: [secret] })
      log.stdout(bytes.subarray(0, cut))
      log.stdout(bytes.subarray(cut))
      const { stdout } = log.end()
      const expected = `token ${mask} and ${mask}!\n`
      expect(stdout).toBe(expected)
      expect(appended.map((entry) => entry.text).join("")).toBe(expected)
      expect(live).toEqual(appended)
    }
  })

  it("lets no fragment of a secret reach the store or live output when fed one byte at a time", () => {
    const secrets = ["hunter2", "ключ-секрет"]
    const { log, appended, live } = sink({ secrets })
    const text = "a hunter2 b ключ-секрет c hunter c ключ\n"
    for (const byte of Buffer.from(text)) log.stdout(Buffer.of(byte))
    const { stdout } = log.end()
    expect(stdout).toBe(`a ${mask} b ${mask} c hunter c ключ\n`)
    expect(live).toEqual(appended)
    // Every stored piece, joined, is the redacted text: no secret could be reassembled from them.
    expect(appended.map((entry) => entry.text).join("")).toBe(stdout)
  })

  it("keeps only the tail of a long output, after a line saying how much more is stored", () => {
    const { log, store } = sink({ keepChars: 100 })
    const lines = Array.from({ length: 500 }, (_, i) => `line ${i}\n`)
    for (const line of lines) log.stdout(Buffer.from(line))
    const { stdout } = log.end()
    const whole = lines.join("")
    const [note, ...rest] = stdout.split("\n")
    const kept = rest.join("\n")
    expect(kept.length).toBeLessThanOrEqual(100)
    expect(whole.endsWith(kept)).toBe(true)
    expect(kept.endsWith("line 499\n")).toBe(true)
    expect(note).toBe(`[runnel: ${whole.length - kept.length} earlier characters are in the task's stored output]`)
    expect(store.output("r1", "tasks/1/build", "stdout")).toBe(whole)
  })

  it("cuts the kept tail between characters, never inside one", () => {
    for (const keepChars of [9, 10, 11, 12]) {
      const { log } = sink({ keepChars })
      log.stdout(Buffer.from("abc"))
      log.stdout(Buffer.from("é🙂é🙂é🙂"))
      const kept = log.end().stdout.split("\n").at(-1) ?? ""
      expect(kept.length).toBeLessThanOrEqual(keepChars)
      expect("abcé🙂é🙂é🙂".endsWith(kept)).toBe(true)
      expect(kept).not.toContain("\uFFFD")
    }
  })

  it("returns only the note when it keeps nothing", () => {
    const { log } = sink({ keepChars: 0 })
    log.stdout("console output\n")
    expect(log.end()).toEqual({
      stdout: "[runnel: 15 earlier characters are in the task's stored output]\n",
      stderr: "",
    })
  })

  it("redacts a secret at the very end of the output when it ends", () => {
    const { log, appended } = sink({ secrets: ["tail-secret"] })
    log.stderr(Buffer.from("exit: tail-sec"))
    expect(appended.map((entry) => entry.text).join("")).toBe("exit: ")
    log.stderr(Buffer.from("ret"))
    expect(log.end().stderr).toBe(`exit: ${mask}`)
  })

  it("keeps memory flat while a task prints 256 MB", () => {
    let stored = 0
    const store: LogStore = {
      ...recordingStore().store,
      append(_runId, _path, _stream, text) {
        stored += text.length
      },
    }
    const log = taskLog({
      runId: "r1",
      path: "tasks/1/flood",
      store,
      redactor: new Redactor(["s3cr3t-value"]),
      keepChars: 4 << 20,
    })
    const chunk = Buffer.from("a line of build output, eighty characters long, like most CI logs are....\n".repeat(880))
    const before = process.memoryUsage().rss
    let peak = before
    for (let written = 0; written < 256e6; written += chunk.length) {
      log.stdout(chunk)
      if (written % (64 * chunk.length) === 0) peak = Math.max(peak, process.memoryUsage().rss)
    }
    const { stdout } = log.end()
    expect(stored).toBeGreaterThanOrEqual(256e6)
    expect(stdout.length).toBeLessThan((4 << 20) + 100)
    // ≈18 MiB measured.
    expect((peak - before) / 2 ** 20).toBeLessThan(64)
  })
})
