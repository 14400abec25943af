import { Writable } from "node:stream"
import type Docker from "dockerode"

/** The floors: the same work done directly with dockerode, as ../shared/floors/ measured it. */
export const image = "busybox"

export async function rawTask(docker: Docker, cmd: string[]): Promise<void> {
  const container = await docker.createContainer({ Image: image, Cmd: cmd })
  await container.start()
  const exit = (await container.wait()) as { StatusCode: number }
  await container.remove()
  if (exit.StatusCode !== 0) throw new Error(`raw task exited ${exit.StatusCode}`)
}

/** Reads a container's whole attach stream, demultiplexed, counting bytes; returns the count. */
export async function rawAttach(docker: Docker, cmd: string[]): Promise<number> {
  let bytes = 0
  const counter = () =>
    new Writable({
      write(chunk: Buffer, _encoding, done) {
        bytes += chunk.length
        done()
      },
    })
  const container = await docker.createContainer({
    Image: image,
    Cmd: cmd,
    AttachStdout: true,
    AttachStderr: true,
    HostConfig: { LogConfig: { Type: "none", Config: {} } },
  })
  const stream = await container.attach({ stream: true, stdout: true, stderr: true })
  const ended = new Promise((resolve, reject) => {
    stream.on("end", resolve)
    stream.on("close", resolve)
    stream.on("error", reject)
  })
  docker.modem.demuxStream(stream, counter(), counter())
  await container.start()
  await ended
  await container.wait()
  await container.remove()
  return bytes
}
