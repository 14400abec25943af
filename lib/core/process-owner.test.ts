import { spawnSync } from "node:child_process"
import { hostname } from "node:os"
import { describe, expect, it } from "vitest"
import { ownerIsDead, processOwner } from "./process-owner.ts"

describe("ownerIsDead", () => {
  it("says a live owner on this host is not dead", () => {
    expect(ownerIsDead(processOwner)).toBe(false)
  })

  it("says an owner whose process has ended is dead", () => {
    const ended = spawnSync("true")
    expect(ownerIsDead(`${hostname()}:${ended.pid}`)).toBe(true)
  })

  it.each([
    ["another host's owner", "some-other-host:1"],
    ["a missing label", undefined],
    ["a malformed label", "no-pid-here"],
  ])("never declares dead %s", (_, recorded) => {
    expect(ownerIsDead(recorded)).toBe(false)
  })
})
