/**
 * Kubernetes' protobuf encoding, read-only and only for the core kinds served
 * here. kubectl sends built-in kinds as `application/vnd.kubernetes.protobuf`
 * (`kubectl create secret`, `kubectl create namespace`) while accepting JSON
 * answers, so decoding request bodies is all that is needed. The envelope is
 * the magic `k8s\0` then a runtime.Unknown {typeMeta, raw}; `raw` is the
 * object in the field numbers of k8s.io/api/core/v1/generated.proto.
 */

export const protobufMediaType = "application/vnd.kubernetes.protobuf"

export class ProtobufError extends Error {
  constructor(message: string) {
    super(message)
    this.name = "ProtobufError"
  }
}

type Field = { number: number; wire: number; value: number | Buffer }

function fields(buffer: Buffer): Field[] {
  const out: Field[] = []
  let position = 0
  const varint = () => {
    let result = 0
    let scale = 1
    for (;;) {
      if (position >= buffer.length) throw new ProtobufError("truncated varint")
      const byte = buffer[position++] ?? 0
      result += (byte & 0x7f) * scale
      if ((byte & 0x80) === 0) return result
      scale *= 128
      if (scale > 2 ** 63) throw new ProtobufError("varint too long")
    }
  }
  while (position < buffer.length) {
    const key = varint()
    const number = Math.floor(key / 8)
    const wire = key % 8
    if (wire === 0) out.push({ number, wire, value: varint() })
    else if (wire === 2) {
      const length = varint()
      if (position + length > buffer.length) throw new ProtobufError("truncated field")
      out.push({ number, wire, value: buffer.subarray(position, position + length) })
      position += length
    } else if (wire === 1) position += 8
    else if (wire === 5) position += 4
    else throw new ProtobufError(`unsupported wire type ${wire}`)
  }
  return out
}

const text = (value: number | Buffer) => (Buffer.isBuffer(value) ? value.toString("utf8") : "")
const bytes = (value: number | Buffer) => (Buffer.isBuffer(value) ? value : Buffer.alloc(0))
const message = (value: number | Buffer) => fields(bytes(value))

function mapEntry(value: number | Buffer): [string, Buffer] {
  let key = ""
  let entry: Buffer = Buffer.alloc(0)
  for (const field of message(value)) {
    if (field.number === 1) key = text(field.value)
    if (field.number === 2) entry = bytes(field.value)
  }
  return [key, entry]
}

function time(value: number | Buffer): string {
  let seconds = 0
  for (const field of message(value)) if (field.number === 1 && typeof field.value === "number") seconds = field.value
  return new Date(seconds * 1000).toISOString().replace(/\.\d+Z$/, "Z")
}

function ownerReference(value: number | Buffer) {
  const reference: Record<string, unknown> = {}
  const names: Record<number, string> = { 1: "kind", 3: "name", 4: "uid", 5: "apiVersion" }
  for (const field of message(value)) {
    const name = names[field.number]
    if (name !== undefined) reference[name] = text(field.value)
    if (field.number === 6) reference.controller = field.value === 1
    if (field.number === 7) reference.blockOwnerDeletion = field.value === 1
  }
  return reference
}

function objectMeta(value: number | Buffer) {
  const meta: Record<string, unknown> = {}
  const strings: Record<number, string> = {
    1: "name",
    2: "generateName",
    3: "namespace",
    5: "uid",
    6: "resourceVersion",
  }
  const labels: Record<string, string> = {}
  const annotations: Record<string, string> = {}
  const owners: unknown[] = []
  const finalizers: string[] = []
  for (const field of message(value)) {
    const name = strings[field.number]
    if (name !== undefined) {
      // Protobuf carries unset strings as empty ones; JSON leaves them out.
      if (text(field.value) !== "") meta[name] = text(field.value)
    } else if (field.number === 8) meta.creationTimestamp = time(field.value)
    else if (field.number === 11) {
      const [key, entry] = mapEntry(field.value)
      labels[key] = entry.toString("utf8")
    } else if (field.number === 12) {
      const [key, entry] = mapEntry(field.value)
      annotations[key] = entry.toString("utf8")
    } else if (field.number === 13) owners.push(ownerReference(field.value))
    else if (field.number === 14) finalizers.push(text(field.value))
  }
  if (Object.keys(labels).length > 0) meta.labels = labels
  if (Object.keys(annotations).length > 0) meta.annotations = annotations
  if (owners.length > 0) meta.ownerReferences = owners
  if (finalizers.length > 0) meta.finalizers = finalizers
  return meta
}

function secret(raw: Buffer) {
  const object: Record<string, unknown> = { apiVersion: "v1", kind: "Secret" }
  const data: Record<string, string> = {}
  const stringData: Record<string, string> = {}
  for (const field of fields(raw)) {
    if (field.number === 1) object.metadata = objectMeta(field.value)
    else if (field.number === 2) {
      const [key, entry] = mapEntry(field.value)
      data[key] = entry.toString("base64")
    } else if (field.number === 3 && text(field.value) !== "") object.type = text(field.value)
    else if (field.number === 4) {
      const [key, entry] = mapEntry(field.value)
      stringData[key] = entry.toString("utf8")
    } else if (field.number === 5) object.immutable = field.value === 1
  }
  if (Object.keys(data).length > 0) object.data = data
  if (Object.keys(stringData).length > 0) object.stringData = stringData
  return object
}

function namespace(raw: Buffer) {
  const object: Record<string, unknown> = { apiVersion: "v1", kind: "Namespace" }
  for (const field of fields(raw)) {
    if (field.number === 1) object.metadata = objectMeta(field.value)
    if (field.number === 2) {
      const finalizers = message(field.value)
        .filter((entry) => entry.number === 1)
        .map((entry) => text(entry.value))
      if (finalizers.length > 0) object.spec = { finalizers }
    }
  }
  return object
}

const decoders: Record<string, (raw: Buffer) => Record<string, unknown>> = {
  "v1/Secret": secret,
  "v1/Namespace": namespace,
}

/** The JSON form of a protobuf-encoded Secret or Namespace. */
export function decodeProtobuf(body: Buffer): Record<string, unknown> {
  if (body.length < 4 || body.subarray(0, 4).toString("latin1") !== "k8s\0") {
    throw new ProtobufError("the body does not start with the Kubernetes protobuf magic number")
  }
  let apiVersion = ""
  let kind = ""
  let raw: Buffer = Buffer.alloc(0)
  for (const field of fields(body.subarray(4))) {
    if (field.number === 1) {
      for (const meta of message(field.value)) {
        if (meta.number === 1) apiVersion = text(meta.value)
        if (meta.number === 2) kind = text(meta.value)
      }
    }
    if (field.number === 2) raw = bytes(field.value)
  }
  const decode = decoders[`${apiVersion}/${kind}`]
  if (decode === undefined)
    throw new ProtobufError(`protobuf is accepted only for v1 Secret and Namespace, not ${apiVersion} ${kind}`)
  return decode(raw)
}
