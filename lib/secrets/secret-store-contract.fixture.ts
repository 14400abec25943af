import { describe, expect, it, onTestFinished } from "vitest"
import { RunnelError } from "../core/errors.ts"
import {
  globalScope,
  maxSecretKeyChars,
  maxSecretValueBytes,
  pipelineScope,
  runScope,
  type SecretStore,
} from "./secret-store.ts"

const pipelineA = pipelineScope("0b9c7c9e-5a55-4c8e-9d59-1f1f2c3a4b5c")
const pipelineB = pipelineScope("7e1d2f3a-0000-4000-8000-abcdefabcdef")

/**
 * What every secret store backend does (STYLE.md section 13), as secret-store.ts
 * specifies it. `open` gives a store on an empty backend of its own; the store
 * is closed when the test ends (close() is idempotent, so a test may close it first).
 * `longestKeyStored` is the longest key name the test writes: maxSecretKeyChars
 * unless the backend cannot hold it (a Kubernetes Secret's keys are at most 253
 * characters) or the server under test cannot (s3rver keeps each object as a
 * file, whose name is at most 255 bytes, where S3 allows 1024).
 */
export function secretStoreContract(
  name: string,
  openStore: () => Promise<SecretStore>,
  { longestKeyStored = maxSecretKeyChars }: { longestKeyStored?: number } = {},
): void {
  const open = async () => {
    const store = await openStore()
    onTestFinished(() => store.close())
    return store
  }

  describe(`${name} secret store`, () => {
    it("gives back what was set, and undefined for a key never set", async () => {
      const store = await open()
      await store.set(globalScope, { TOKEN: "s3cret", EMPTY: "", UNICODE: "pässwörd ✓ 🔑" })
      expect(await store.get(globalScope, "TOKEN")).toBe("s3cret")
      expect(await store.get(globalScope, "EMPTY")).toBe("")
      expect(await store.get(globalScope, "UNICODE")).toBe("pässwörd ✓ 🔑")
      expect(await store.get(globalScope, "MISSING")).toBeUndefined()
    })

    it("replaces a value that is set again and keeps the others", async () => {
      const store = await open()
      await store.set(globalScope, { A: "one", B: "two" })
      await store.set(globalScope, { A: "uno" })
      expect(await store.get(globalScope, "A")).toBe("uno")
      expect(await store.get(globalScope, "B")).toBe("two")
    })

    it("keeps scopes apart", async () => {
      const store = await open()
      await store.set(globalScope, { TOKEN: "global-token" })
      await store.set(pipelineA, { TOKEN: "a-token", ONLY_A: "a" })
      await store.set(pipelineB, { TOKEN: "b-token" })
      expect(await store.get(pipelineA, "TOKEN")).toBe("a-token")
      expect(await store.get(pipelineB, "TOKEN")).toBe("b-token")
      expect(await store.get(globalScope, "TOKEN")).toBe("global-token")
      expect(await store.get(pipelineB, "ONLY_A")).toBeUndefined()
      expect(await store.keys(pipelineB)).toEqual(["TOKEN"])
    })

    it("lists a scope's keys sorted, and nothing for an empty scope", async () => {
      const store = await open()
      await store.set(pipelineA, { ZETA: "z", ALPHA: "a", _UNDER: "u", Mixed: "m", BETA: "b" })
      expect(await store.keys(pipelineA)).toEqual(["ALPHA", "BETA", "Mixed", "ZETA", "_UNDER"])
      expect(await store.keys(pipelineB)).toEqual([])
    })

    it("gives every value of a scope for redaction", async () => {
      const store = await open()
      await store.set(pipelineA, { A: "alpha-value", B: "beta-value" })
      await store.set(globalScope, { G: "global-value" })
      expect((await store.values(pipelineA)).sort()).toEqual(["alpha-value", "beta-value"])
      expect(await store.values(pipelineB)).toEqual([])
    })

    it("deletes one key, and says whether it was there", async () => {
      const store = await open()
      await store.set(pipelineA, { A: "1", B: "2" })
      expect(await store.delete(pipelineA, "A")).toBe(true)
      expect(await store.delete(pipelineA, "A")).toBe(false)
      expect(await store.delete(pipelineB, "B")).toBe(false)
      expect(await store.keys(pipelineA)).toEqual(["B"])
    })

    it("deletes a whole scope and counts what it removed, leaving other scopes", async () => {
      const store = await open()
      await store.set(pipelineA, { A: "1", B: "2", C: "3" })
      await store.set(globalScope, { A: "g" })
      expect(await store.deleteScope(pipelineA)).toBe(3)
      expect(await store.deleteScope(pipelineA)).toBe(0)
      expect(await store.keys(pipelineA)).toEqual([])
      expect(await store.get(globalScope, "A")).toBe("g")
    })

    it("rejects bad key names with the rule, and writes none of the entries", async () => {
      const store = await open()
      await store.set(globalScope, { KEEP: "old" })
      for (const bad of ["1ABC", "A-B", "A B", "", "ÄPFEL", "a.b", "$HOME"]) {
        await expect(store.set(globalScope, { KEEP: "new", [bad]: "v" }), bad).rejects.toThrow(
          expect.objectContaining({
            status: 400,
            message: expect.stringContaining('use letters, digits and "_", not starting with a digit'),
          }),
        )
      }
      await expect(store.set(globalScope, { ["K".repeat(257)]: "v" })).rejects.toThrow(
        expect.objectContaining({ status: 400, message: expect.stringContaining("at most 256 characters") }),
      )
      await store.set(globalScope, { ["K".repeat(longestKeyStored)]: "v" })
      expect(await store.get(globalScope, "K".repeat(longestKeyStored))).toBe("v")
      expect(await store.get(globalScope, "KEEP")).toBe("old")
    })

    it("rejects a value over 64 KiB without showing it", async () => {
      const store = await open()
      const large = "x".repeat(maxSecretValueBytes - 1)
      await store.set(globalScope, { LARGE: `${large}y` })
      expect(await store.get(globalScope, "LARGE")).toHaveLength(maxSecretValueBytes)
      const error = await store.set(globalScope, { HUGE: `${large}éé` }).catch((error: unknown) => error)
      expect(error).toBeInstanceOf(RunnelError)
      expect((error as RunnelError).status).toBe(400)
      expect((error as RunnelError).message).toBe('secret "HUGE" is too large: a value is at most 64 KiB of UTF-8')
    })

    it("rejects a scope that is neither global nor a pipeline's", async () => {
      const store = await open()
      for (const scope of ["", "Global", "pipeline:", "pipeline:a b", "team:x"]) {
        await expect(store.get(scope, "A"), scope).rejects.toThrow(
          expect.objectContaining({ status: 400, message: expect.stringContaining('use "global", "pipeline:') }),
        )
      }
      expect(() => pipelineScope("")).toThrow(expect.objectContaining({ status: 400 }))
    })

    it("keeps a run's own secrets in a scope of their own, gone with deleteScope", async () => {
      const store = await open()
      const run = runScope("run-7f3a")
      await store.set(run, { TOKEN: "run-token-value" })
      await store.set(globalScope, { TOKEN: "global-token-value" })
      expect(await store.get(run, "TOKEN")).toBe("run-token-value")
      expect(await store.deleteScope(run)).toBe(1)
      expect(await store.get(run, "TOKEN")).toBeUndefined()
      expect(await store.get(globalScope, "TOKEN")).toBe("global-token-value")
    })

    it("sets nothing for no entries", async () => {
      const store = await open()
      await store.set(pipelineA, {})
      expect(await store.keys(pipelineA)).toEqual([])
    })

    it("closes once, and refuses calls after", async () => {
      const store = await open()
      await store.close()
      await store.close()
      await expect(store.get(globalScope, "A")).rejects.toThrow("the secret store is closed")
    })
  })
}
