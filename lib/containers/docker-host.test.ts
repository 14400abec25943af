import { describe, expect, it, onTestFinished } from "vitest"
import { describeDocker, dockerHost } from "../../test/docker.ts"
import { DockerHost, demuxer } from "./docker-host.ts"

/** One frame of Docker's multiplexed format: stream byte, three zeros, big-endian length, payload. */
function frame(stream: 1 | 2, payload: string): Buffer {
  const body = Buffer.from(payload)
  const header = Buffer.alloc(8)
  header[0] = stream
  header.writeUInt32BE(body.length, 4)
  return Buffer.concat([header, body])
}

function collected() {
  const out: Buffer[] = []
  const err: Buffer[] = []
  return {
    sink: {
      stdout: (chunk: Buffer) => out.push(Buffer.from(chunk)),
      stderr: (chunk: Buffer) => err.push(Buffer.from(chunk)),
    },
    text: () => ({ stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString() }),
  }
}

describe("demuxer", () => {
  const wire = Buffer.concat([
    frame(1, "first line\n"),
    frame(2, "an error: ünïcödé ✓\n"),
    frame(1, ""),
    frame(1, "x".repeat(70_000)),
    frame(2, "last\n"),
  ])
  const expected = { stdout: `first line\n${"x".repeat(70_000)}`, stderr: "an error: ünïcödé ✓\nlast\n" }

  it("splits a whole buffer into each stream's bytes", () => {
    const { sink, text } = collected()
    demuxer(sink)(wire)
    expect(text()).toEqual(expected)
  })

  it("gives the same bytes wherever the chunks are cut, headers and characters included", () => {
    for (let cut = 1; cut < 60; cut++) {
      const { sink, text } = collected()
      const demux = demuxer(sink)
      demux(wire.subarray(0, cut))
      demux(wire.subarray(cut, cut + 5))
      demux(wire.subarray(cut + 5))
      expect(text()).toEqual(expected)
    }
  })

  it("copes with one byte at a time", () => {
    const { sink, text } = collected()
    const demux = demuxer(sink)
    for (let at = 0; at < wire.length; at++) demux(wire.subarray(at, at + 1))
    expect(text()).toEqual(expected)
  })
})

describeDocker("a container's end", () => {
  const docker = new DockerHost(dockerHost ?? "/var/run/docker.sock", "start Docker")

  async function ended(script: string) {
    const spec = {
      image: "busybox",
      command: ["sh", "-c", script],
      env: {},
      labels: { "runnel.test": "docker-host" },
      mounts: [],
      output: "kept" as const,
      memoryBytes: 16 * 1024 * 1024,
    }
    const id = await docker.create(
      spec,
      { progress: () => {}, signal: new AbortController().signal },
      "the test's container",
    )
    onTestFinished(() => docker.remove(id))
    await docker.start(id, "sh", "busybox", "the test's container")
    await docker.wait(id)
    return docker.inspect(id)
  }

  it("says OOMKilled when the kernel killed a process of it for its memory limit", async () => {
    expect(await ended("head -c 64m /dev/zero | tail")).toMatchObject({ exitCode: 137, oomKilled: true })
  })

  it("does not say OOMKilled of a 137 that was a plain SIGKILL within its memory limit", async () => {
    expect(await ended("sleep 30 & kill -9 $!; wait $!")).toMatchObject({ exitCode: 137, oomKilled: false })
  })
})
