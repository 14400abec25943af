import { describe, expect, it, onTestFinished } from "vitest"
import { Redactor } from "../logs/redactor.ts"
import { globalScope, pipelineScope, resolverFor, type SecretStore } from "./secret-store.ts"
import { openSqliteSecretStore } from "./sqlite-secret-store.ts"

async function memoryStore(): Promise<SecretStore> {
  const store = await openSqliteSecretStore({ path: ":memory:" })
  onTestFinished(() => store.close())
  return store
}

const pipeline = pipelineScope("0b9c7c9e-5a55-4c8e-9d59-1f1f2c3a4b5c")
const otherPipeline = pipelineScope("7e1d2f3a-0000-4000-8000-abcdefabcdef")

describe("secret scopes", () => {
  it("names a pipeline's scope by its uid", () => {
    expect(pipelineScope("0b9c7c9e-5a55-4c8e-9d59-1f1f2c3a4b5c")).toBe("pipeline:0b9c7c9e-5a55-4c8e-9d59-1f1f2c3a4b5c")
    expect(globalScope).toBe("global")
  })

  it("refuses a uid that would make an ambiguous scope", () => {
    for (const uid of ["", "a b", "a:b", "../x", "x".repeat(129)]) {
      expect(() => pipelineScope(uid), uid).toThrow(expect.objectContaining({ status: 400 }))
    }
  })
})

describe("resolverFor", () => {
  it("lets a pipeline-scoped value override a global one", async () => {
    const store = await memoryStore()
    await store.set(globalScope, { TOKEN: "global-token", REGION: "eu" })
    await store.set(pipeline, { TOKEN: "pipeline-token" })
    const secrets = resolverFor(store, [pipeline, globalScope])
    expect(await secrets.get("TOKEN")).toBe("pipeline-token")
    expect(await secrets.get("REGION")).toBe("eu")
    expect(await secrets.get("MISSING")).toBeUndefined()
  })

  it("does not see another pipeline's secrets", async () => {
    const store = await memoryStore()
    await store.set(otherPipeline, { TOKEN: "other" })
    const secrets = resolverFor(store, [pipeline, globalScope])
    expect(await secrets.get("TOKEN")).toBeUndefined()
    expect(await secrets.values()).toEqual([])
  })

  it("gives every value of every scope for redaction, overridden ones too, each once", async () => {
    const store = await memoryStore()
    await store.set(globalScope, { TOKEN: "global-token", SAME: "shared" })
    await store.set(pipeline, { TOKEN: "pipeline-token", ALSO: "shared" })
    await store.set(otherPipeline, { TOKEN: "not-visible" })
    const secrets = resolverFor(store, [pipeline, globalScope])
    expect([...(await secrets.values())].sort()).toEqual(["global-token", "pipeline-token", "shared"])
    const redactor = new Redactor(await secrets.values())
    expect(redactor.redact("global-token pipeline-token not-visible")).toBe("***REDACTED*** ***REDACTED*** not-visible")
  })

  it("sees writes made after it was made", async () => {
    const store = await memoryStore()
    const secrets = resolverFor(store, [pipeline, globalScope])
    await store.set(globalScope, { LATE: "late" })
    expect(await secrets.get("LATE")).toBe("late")
  })

  it("refuses a bad scope when it is made", async () => {
    const store = await memoryStore()
    expect(() => resolverFor(store, ["pipeline:"])).toThrow(expect.objectContaining({ status: 400 }))
  })
})
