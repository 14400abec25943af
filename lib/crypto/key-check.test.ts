import { describe, expect, it } from "vitest"
import { checkKey, type KeyCheck } from "./key-check.ts"
import { randomKey, type Sealed, Sealer } from "./sealer.ts"

const check: KeyCheck = { text: "runnel test key check", aad: "test:key-check" }

/** A store's key check slot, as a table with one row would keep it. */
function slot() {
  let row: Sealed | undefined
  return {
    read: () => row,
    storage: (stored: Sealed | undefined) => ({
      stored,
      storeIfMissing(fresh: Sealed) {
        row ??= fresh
        return row
      },
    }),
  }
}

describe("checkKey", () => {
  it("stores a key check in a new store, and matches the same key at every later open", () => {
    const store = slot()
    const key = randomKey()
    expect(checkKey(new Sealer(key), check, store.storage(undefined)).matches).toBe(true)
    const stored = store.read()
    expect(stored).toBeDefined()
    expect(checkKey(new Sealer(key), check, store.storage(stored))).toEqual({ matches: true, stored })
  })

  it("does not match another key, and gives the stored key check back", () => {
    const store = slot()
    checkKey(new Sealer(randomKey()), check, store.storage(undefined))
    const stored = store.read()
    expect(checkKey(new Sealer(randomKey()), check, store.storage(stored))).toEqual({ matches: false, stored })
  })

  it("checks against the key check another process stored first, not its own", () => {
    const store = slot()
    // Both read "none"; the first stores its check, then the second, with another key, finds it.
    const first = store.storage(undefined)
    const second = store.storage(undefined)
    expect(checkKey(new Sealer(randomKey()), check, first).matches).toBe(true)
    expect(checkKey(new Sealer(randomKey()), check, second).matches).toBe(false)
  })

  it("does not match a key check sealed for other additional data", () => {
    const store = slot()
    const key = randomKey()
    checkKey(new Sealer(key), check, store.storage(undefined))
    expect(checkKey(new Sealer(key), { ...check, aad: "other" }, store.storage(store.read())).matches).toBe(false)
  })
})
