import { describe, expect, it } from "vitest"
import { JobSlots } from "./job-slots.ts"

const tick = () => new Promise((resolve) => setImmediate(resolve))

describe("job slots", () => {
  it("lets one build of a serial job run at a time, in arrival order", async () => {
    const slots = new JobSlots()
    const order: string[] = []
    const first = await slots.acquire("p", "deploy", { serial: true, serialGroups: [] })
    const second = slots.acquire("p", "deploy", { serial: true, serialGroups: [] }).then((release) => {
      order.push("second")
      return release
    })
    const third = slots.acquire("p", "deploy", { serial: true, serialGroups: [] }).then((release) => {
      order.push("third")
      return release
    })
    await tick()
    expect(order).toEqual([])
    first()
    ;(await second)()
    ;(await third)()
    expect(order).toEqual(["second", "third"])
  })

  it("counts the acquisitions waiting, until each is granted or aborted", async () => {
    const slots = new JobSlots()
    const serial = { serial: true, serialGroups: [] }
    const first = await slots.acquire("p", "deploy", serial)
    expect(slots.waiting).toBe(0)
    const aborted = new AbortController()
    const gaveUp = slots.acquire("p", "deploy", serial, aborted.signal).catch(() => "aborted")
    const next = slots.acquireRun("p", 1)
    const run = slots.acquireRun("p", 1)
    await tick()
    expect(slots.waiting).toBe(2) // the second deploy and the second run; the first run took its slot at once
    ;(await next)()
    await tick()
    expect(slots.waiting).toBe(1)
    aborted.abort(new Error("stopped"))
    expect(await gaveUp).toBe("aborted")
    expect(slots.waiting).toBe(0)
    first()
    ;(await run)()
  })

  it("admits max_in_flight builds at once, and keeps other jobs and pipelines apart", async () => {
    const slots = new JobSlots()
    const limit = { serial: false, serialGroups: [], maxInFlight: 2 }
    const a = await slots.acquire("p", "test", limit)
    await slots.acquire("p", "test", limit)
    let third = false
    const waiting = slots.acquire("p", "test", limit).then(() => {
      third = true
    })
    await slots.acquire("p", "other", limit)
    await slots.acquire("q", "test", limit)
    await tick()
    expect(third).toBe(false)
    a()
    await waiting
    expect(third).toBe(true)
  })

  it("runs one job of a serial group at a time, and a job without limits at once", async () => {
    const slots = new JobSlots()
    const release = await slots.acquire("p", "a", { serial: false, serialGroups: ["deploys"] })
    let b = false
    const waiting = slots.acquire("p", "b", { serial: false, serialGroups: ["deploys"] }).then(() => {
      b = true
    })
    await slots.acquire("p", "free", { serial: false, serialGroups: [] })
    await tick()
    expect(b).toBe(false)
    release()
    release()
    await waiting
    expect(b).toBe(true)
  })
})

describe("job slots on a stop", () => {
  it("gives up a wait whose signal aborts, and lets the next waiter in", async () => {
    const slots = new JobSlots()
    const first = await slots.acquire("p", "deploy", { serial: true, serialGroups: ["g"] })
    const stop = new AbortController()
    const stopped = slots.acquire("p", "deploy", { serial: true, serialGroups: ["g"] }, stop.signal)
    let next = false
    const waiting = slots.acquire("p", "deploy", { serial: true, serialGroups: ["g"] }).then(() => {
      next = true
    })
    stop.abort(new Error("run stopped"))
    await expect(stopped).rejects.toThrow("run stopped")
    first()
    await waiting
    expect(next).toBe(true)
  })

  it("admits a pipeline's runs up to its max_in_flight", async () => {
    const slots = new JobSlots()
    const one = await slots.acquireRun("p", 1)
    let second = false
    const waiting = slots.acquireRun("p", 1).then(() => {
      second = true
    })
    await tick()
    expect(second).toBe(false)
    one()
    await waiting
    expect(second).toBe(true)
  })
})
