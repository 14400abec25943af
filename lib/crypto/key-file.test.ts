import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { describe, expect, it, onTestFinished } from "vitest"
import { SystemError } from "../core/errors.ts"
import { createKeyFile, keyFromFile, readKeyFile } from "./key-file.ts"

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "runnel-key-file-"))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

const named = (file: string) => `the test key file "${file}"`

describe("key files", () => {
  it("are created with a random key in base64 on one line, mode 0600, and read back", () => {
    const file = join(tempDir(), "test.key")
    const key = createKeyFile(file, named)
    expect(key).toHaveLength(32)
    expect(statSync(file).mode & 0o777).toBe(0o600)
    expect(readFileSync(file, "utf8")).toBe(`${key.toString("base64")}\n`)
    expect(readKeyFile(file, named)?.equals(key)).toBe(true)
  })

  it("give a second creator the first one's key, and leave no temporary file", () => {
    const dir = tempDir()
    const file = join(dir, "kube.db.key")
    const first = createKeyFile(file, named)
    expect(createKeyFile(file, named).equals(first)).toBe(true)
    expect(readdirSync(dir)).toEqual(["kube.db.key"])
  })

  it("read as undefined when missing", () => {
    expect(readKeyFile(join(tempDir(), "missing.key"), named)).toBeUndefined()
  })

  it("that hold no key are refused without quoting their content", () => {
    const file = join(tempDir(), "bad.key")
    writeFileSync(file, "almost-a-secret-value\n")
    const error = (() => {
      try {
        return readKeyFile(file, named)
      } catch (error) {
        return error
      }
    })()
    expect(error).toBeInstanceOf(SystemError)
    expect((error as Error).message).toBe(
      `the test key file "${file}" does not hold a key: it must hold 32 random bytes in base64`,
    )
  })
})

describe("keyFromFile", () => {
  it("reads an existing key file whether or not it may create one", () => {
    const file = join(tempDir(), "test.key")
    const key = createKeyFile(file, named)
    const missing = () => new Error("not called")
    expect(keyFromFile(file, named, { mayCreate: false, missing }).equals(key)).toBe(true)
    expect(keyFromFile(file, named, { mayCreate: true, missing }).equals(key)).toBe(true)
  })

  it("creates a missing key file only when it may, and otherwise throws what missing() gives", () => {
    const file = join(tempDir(), "test.key")
    expect(() => keyFromFile(file, named, { mayCreate: false, missing: () => new Error("restore it") })).toThrow(
      "restore it",
    )
    expect(existsSync(file)).toBe(false)
    const key = keyFromFile(file, named, { mayCreate: true, missing: () => new Error("not called") })
    expect(readKeyFile(file, named)?.equals(key)).toBe(true)
  })
})
