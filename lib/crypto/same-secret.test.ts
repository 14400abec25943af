import { describe, expect, it } from "vitest"
import { sameSecret } from "./same-secret.ts"

describe("sameSecret", () => {
  it("compares plain secrets of any lengths", () => {
    expect(sameSecret("secret", "secret")).toBe(true)
    expect(sameSecret("secre", "secret")).toBe(false)
    expect(sameSecret("", "secret")).toBe(false)
    expect(sameSecret("sécret", "sécret")).toBe(true)
  })
})
