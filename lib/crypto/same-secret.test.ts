import { describe, expect, it } from "vitest"
import { matchesSecret, sameSecret } from "./same-secret.ts"

describe("sameSecret", () => {
  it("compares plain secrets of any lengths", () => {
    expect(sameSecret("secret", "secret")).toBe(true)
    expect(sameSecret("secre", "secret")).toBe(false)
    expect(sameSecret("", "secret")).toBe(false)
    expect(sameSecret("sécret", "sécret")).toBe(true)
  })
})

describe("matchesSecret", () => {
  it("compares each given value with the one secret it was made for", () => {
    const isToken = matchesSecret("Bearer process-token")
    expect(isToken("Bearer process-token")).toBe(true)
    expect(isToken("Bearer process-toke")).toBe(false)
    expect(isToken("Bearer process-token2")).toBe(false)
    expect(isToken("")).toBe(false)
  })
})
