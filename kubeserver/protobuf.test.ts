import { describe, expect, it } from "vitest"
import { decodeProtobuf } from "./protobuf.ts"

// A minimal protobuf writer, enough to build what kubectl sends.
const varint = (value: number) => {
  const bytes: number[] = []
  let rest = value
  while (rest >= 0x80) {
    bytes.push((rest & 0x7f) | 0x80)
    rest = Math.floor(rest / 128)
  }
  bytes.push(rest)
  return Buffer.from(bytes)
}
const field = (number: number, value: Buffer | string | number) => {
  if (typeof value === "number") return Buffer.concat([varint(number * 8), varint(value)])
  const bytes = typeof value === "string" ? Buffer.from(value) : value
  return Buffer.concat([varint(number * 8 + 2), varint(bytes.length), bytes])
}
const entry = (number: number, key: string, value: string) =>
  field(number, Buffer.concat([field(1, key), field(2, value)]))

function envelope(apiVersion: string, kind: string, raw: Buffer) {
  const typeMeta = Buffer.concat([field(1, apiVersion), field(2, kind)])
  return Buffer.concat([Buffer.from("k8s\0", "latin1"), field(1, typeMeta), field(2, raw)])
}

describe("protobuf request bodies", () => {
  it("decode a Secret as kubectl create secret sends it", () => {
    const metadata = Buffer.concat([field(1, "hook"), field(2, ""), field(3, "team-a"), entry(11, "app", "runnel")])
    const secret = Buffer.concat([
      field(1, metadata),
      entry(2, "webhookSecret", "s3cret"),
      field(3, "Opaque"),
      field(5, 1),
    ])
    expect(decodeProtobuf(envelope("v1", "Secret", secret))).toEqual({
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "hook", namespace: "team-a", labels: { app: "runnel" } },
      data: { webhookSecret: Buffer.from("s3cret").toString("base64") },
      type: "Opaque",
      immutable: true,
    })
  })

  it("decode a Namespace and refuse other kinds or a missing magic number", () => {
    const namespace = Buffer.concat([field(1, field(1, "team-a"))])
    expect(decodeProtobuf(envelope("v1", "Namespace", namespace))).toEqual({
      apiVersion: "v1",
      kind: "Namespace",
      metadata: { name: "team-a" },
    })
    expect(() => decodeProtobuf(envelope("v1", "Pod", Buffer.alloc(0)))).toThrow("not v1 Pod")
    expect(() => decodeProtobuf(Buffer.from("{}"))).toThrow("magic number")
    expect(() =>
      decodeProtobuf(Buffer.concat([Buffer.from("k8s\0", "latin1"), Buffer.from([0x0a, 0x05, 0x01])])),
    ).toThrow("truncated")
  })
})
