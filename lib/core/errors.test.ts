import { describe, expect, it } from "vitest"
import { featureDisabled } from "./errors.ts"

describe("featureDisabled", () => {
  it("is a 403 that names the feature and the flag that enables it", () => {
    expect(featureDisabled("gates")).toMatchObject({
      status: 403,
      code: "feature_disabled",
      message: 'the "gates" feature is not enabled on this server; start it with --allowed-features naming gates',
    })
  })
})
