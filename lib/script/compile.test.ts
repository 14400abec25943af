import { describe, expect, it } from "vitest"
import { compileScript } from "./compile.ts"

describe("compileScript", () => {
  it("compiles TypeScript to CommonJS the sandbox can run", async () => {
    const script = await compileScript("export const pipeline = async (): Promise<void> => {}\n", "hello.ts")
    expect(script.code).toContain("exports")
    expect(script.code).not.toContain("Promise<void>")
  })

  it("compiles a pipeline's source once: its later runs, concurrent ones too, get the same compiled script", async () => {
    const source = `export const pipeline = async () => { console.log(${Date.now()}) }\n`
    const [first, second] = await Promise.all([compileScript(source, "cached.ts"), compileScript(source, "cached.ts")])
    expect(second).toBe(first)
    expect(await compileScript(source, "cached.ts")).toBe(first)
    expect(await compileScript(source, "other.ts")).not.toBe(first)
  })

  it("names the line of a syntax error every time, since a failed compile is not kept", async () => {
    const source = "export const pipeline = async () => {\n  let x = \n}\n"
    for (let attempt = 0; attempt < 2; attempt++) {
      await expect(compileScript(source, "broken.ts")).rejects.toThrow(/^broken\.ts:3:1: /)
    }
  })
})
