import { addAbortListener } from "node:events"
import { Agent } from "node:http"
import type { Readable } from "node:stream"
import Docker from "dockerode"
import { errorMessage, SystemError } from "../core/errors.ts"

/**
 * The one way runnel runs a container: the docker driver's tasks and the
 * embedded Kubernetes API's Pods both go through this class, so creating,
 * pulling, attaching, waiting and removing behave and fail alike. It knows
 * nothing of tasks or Pods: callers pass labels and names.
 */

/** A container as runnel creates it. */
export type ContainerSpec = {
  readonly image: string
  /** Run as given: the image's ENTRYPOINT does not wrap it. */
  readonly command: readonly string[]
  readonly env: Readonly<Record<string, string>>
  readonly workDir?: string | undefined
  readonly labels: Readonly<Record<string, string>>
  /** Named Docker volumes mounted at container paths. */
  readonly mounts: readonly { readonly volume: string; readonly path: string; readonly readOnly?: boolean }[]
  /**
   * "attach": output only reaches an attached reader (no log driver: json-file makes line output 3x
   * slower, FLOORS.md section 2). "kept": the daemon keeps it (json-file), for logs() after the fact.
   */
  readonly output: "attach" | "kept"
  readonly security?: ContainerSecurity
  readonly memoryBytes?: number | undefined
  /** A CFS quota: at most this many CPUs, in billionths. */
  readonly nanoCpus?: number | undefined
  /** A relative CPU weight (1024 is the default), no cap. */
  readonly cpuShares?: number | undefined
}

/** What a Pod's securityContext asks of the container runtime. */
export type ContainerSecurity = {
  readonly noNewPrivileges?: boolean
  readonly dropCapabilities?: readonly string[]
  readonly addCapabilities?: readonly string[]
  readonly privileged?: boolean
  readonly readOnlyRootFilesystem?: boolean
  /** `uid` or `uid:gid`. */
  readonly user?: string | undefined
}

/** How a pull reports progress and when it gives up. */
export type PullOptions = {
  readonly progress: (line: string) => void
  readonly signal: AbortSignal
  readonly timeoutMs?: number | undefined
}

/** A pull that failed: `reason` is the daemon's (or registry's) own words. */
export class ImagePullError extends SystemError {
  readonly image: string
  readonly reason: string
  constructor(image: string, reason: string) {
    super(
      `image "${image}" could not be pulled: ${reason}; is the name right, and can the Docker daemon reach its registry?`,
    )
    this.name = "ImagePullError"
    this.image = image
    this.reason = reason
  }
}

/** What a finished or running container's inspection says. */
export type ContainerState = {
  readonly running: boolean
  readonly exitCode: number
  readonly oomKilled: boolean
  readonly startedAt: string | undefined
  readonly finishedAt: string | undefined
  readonly error: string
}

export type LogOptions = {
  readonly follow: boolean
  readonly stdout: boolean
  readonly stderr: boolean
  readonly timestamps: boolean
  /** Unix seconds. */
  readonly since?: number | undefined
  readonly tail?: number | undefined
}

export type OutputSink = { stdout(chunk: Buffer): void; stderr(chunk: Buffer): void }

export const defaultDockerSocket = "/var/run/docker.sock"

export class DockerHost {
  readonly where: string
  readonly #docker: Docker
  /** The same daemon on a new connection per request: see ping(). */
  readonly #fresh: Docker
  readonly #hint: string

  /** `host`: a socket path, `unix:///path`, `tcp://host:port` or `http://host:port`; `hint` ends the message when the daemon cannot be reached. */
  constructor(host: string, hint: string) {
    this.#docker = new Docker(clientOptions(host))
    // dockerode hands `agent` to docker-modem, which uses it; its type leaves it out.
    this.#fresh = new Docker({ ...clientOptions(host), agent: new Agent({ keepAlive: false }) } as Docker.DockerOptions)
    this.where = host
    this.#hint = hint
  }

  /**
   * Whether the daemon answers at all, on a new connection: a daemon that is
   * stopping closes its socket at once but keeps answering on connections it
   * had open (Node's agent keeps them alive) while it kills its containers,
   * so only a new connection tells that it is going away.
   */
  async ping(): Promise<boolean> {
    try {
      await this.#fresh.ping()
      return true
    } catch {
      return false
    }
  }

  /** Creates the container, pulling its image first when the daemon does not have it; resolves with its id. */
  async create(spec: ContainerSpec, pull: PullOptions, what: string): Promise<string> {
    const options = createOptions(spec)
    try {
      return (await this.#docker.createContainer(options)).id
    } catch (error) {
      if (statusCode(error) !== 404) throw this.error(error, `${what} could not be created`)
    }
    await this.pull(spec.image, pull)
    pull.signal.throwIfAborted()
    try {
      return (await this.#docker.createContainer(options)).id
    } catch (error) {
      throw this.error(error, `${what} could not be created after pulling "${spec.image}"`)
    }
  }

  /**
   * Attaches to a created container's output, handing each frame on as it arrives;
   * resolves with a promise of the stream's end (already guarded against being unhandled),
   * wrapped so that awaiting attach() does not wait for the end.
   */
  async attach(id: string, output: OutputSink): Promise<{ ended: Promise<void> }> {
    const stream = await this.#docker.getContainer(id).attach({ stream: true, stdout: true, stderr: true })
    const ended = streamEnd(stream)
    ended.catch(() => {}) // awaited by the caller; this only keeps an early exit from leaving it unhandled
    const demux = demuxer(output)
    stream.on("data", demux)
    return { ended }
  }

  /** Starts a created container; a command missing from the image is said so. */
  async start(id: string, command: string, image: string, what: string): Promise<void> {
    try {
      await this.#docker.getContainer(id).start()
    } catch (error) {
      const reason = daemonReason(error)
      if (statusCode(error) !== undefined && /executable file not found|no such file or directory/.test(reason)) {
        throw new SystemError(`executable "${command}" not found in image "${image}": ${reason}`, { cause: error })
      }
      throw this.error(error, `${what} could not start in image "${image}"`)
    }
  }

  /**
   * The container's exit code once it has ended. Rejects (ECONNRESET) when
   * the daemon is killed meanwhile: dockerode's own wait() never settles
   * then, since docker-modem does not see a response cut off, so the answer
   * is read here as a stream, whose iteration does.
   */
  async wait(id: string): Promise<number> {
    const answer = await new Promise<NodeJS.ReadableStream>((resolve, reject) =>
      this.#docker.modem.dial(
        {
          path: `/containers/${id}/wait?`,
          method: "POST",
          isStream: true,
          statusCodes: { 200: true, 400: "bad parameter", 404: "no such container", 500: "server error" },
          options: {},
        },
        (error: unknown, stream: unknown) => (error ? reject(error) : resolve(stream as NodeJS.ReadableStream)),
      ),
    )
    let body = ""
    for await (const chunk of answer) body += String(chunk)
    const { StatusCode } = JSON.parse(body) as { StatusCode: number }
    return StatusCode
  }

  /** SIGKILL, quietly: the container may have ended or gone already. */
  kill(id: string): void {
    void this.#docker
      .getContainer(id)
      .kill()
      .catch(() => {})
  }

  /** SIGTERM, then SIGKILL after `graceSeconds`, as `docker stop -t`; an ended or gone container is fine. */
  async stop(id: string, graceSeconds: number): Promise<void> {
    await this.#docker
      .getContainer(id)
      .stop({ t: graceSeconds })
      .catch((error: unknown) => {
        if (statusCode(error) !== 304) ifGone(error)
      })
  }

  /** Removes a container with anything it runs; 409 means a removal is already under way. */
  async remove(id: string): Promise<void> {
    await this.#docker
      .getContainer(id)
      .remove({ force: true, v: true })
      .catch((error: unknown) => {
        if (statusCode(error) !== 409) ifGone(error)
      })
  }

  async inspect(id: string): Promise<ContainerState> {
    const { State, HostConfig } = await this.#docker.getContainer(id).inspect()
    const time = (text: string | undefined) => (text === undefined || text.startsWith("0001-") ? undefined : text)
    const state = {
      running: State.Running,
      exitCode: State.ExitCode,
      oomKilled: State.OOMKilled,
      startedAt: time(State.StartedAt),
      finishedAt: time(State.FinishedAt),
      error: State.Error,
    }
    if (state.running || state.oomKilled || state.exitCode !== 137 || !((HostConfig.Memory ?? 0) > 0)) return state
    return { ...state, oomKilled: await this.#oomEvent(id, state.startedAt) }
  }

  /**
   * Whether the daemon logged an OOM kill of the container since it started. Docker 20.10 sets
   * State.OOMKilled only when containerd's OOM event reaches it before the exit event, which under
   * load it may not; the "oom" event is logged either way (late by a moment at most, so the daemon is
   * asked for the events until half a second from now).
   */
  async #oomEvent(id: string, startedAt: string | undefined): Promise<boolean> {
    const since = startedAt === undefined ? 0 : Math.floor(Date.parse(startedAt) / 1000)
    const stream = await this.#docker.getEvents({
      since,
      until: (Date.now() + 500) / 1000,
      filters: JSON.stringify({ container: [id], event: ["oom"] }),
    })
    return new Promise((resolve, reject) => {
      stream.on("data", () => {
        resolve(true)
        ;(stream as Readable).destroy()
      })
      stream.on("end", () => resolve(false))
      stream.on("close", () => resolve(false))
      stream.on("error", reject)
    })
  }

  /** The output the daemon kept (spec.output "kept"), demultiplexed into `output`; resolves when the stream ends. */
  async logs(id: string, options: LogOptions, output: OutputSink, signal: AbortSignal): Promise<void> {
    const container = this.#docker.getContainer(id)
    const request = {
      follow: options.follow,
      stdout: options.stdout,
      stderr: options.stderr,
      timestamps: options.timestamps,
      ...(options.since === undefined ? {} : { since: options.since }),
      ...(options.tail === undefined ? {} : { tail: options.tail }),
      abortSignal: signal,
    }
    // dockerode types follow: true and false as two overloads; the stream and the buffer are one format.
    const answer = (await container.logs(request as { follow: true })) as NodeJS.ReadableStream | Buffer
    if (Buffer.isBuffer(answer)) {
      demuxer(output)(answer)
      return
    }
    const ended = streamEnd(answer)
    answer.on("data", demuxer(output))
    // Called at once too if the signal was aborted while the daemon answered.
    addAbortListener(signal, () => (answer as unknown as { destroy(): void }).destroy?.())
    await ended.catch((error: unknown) => {
      if (!signal.aborted) throw error
    })
  }

  /** Writes files into a created container before it starts (a tar archive unpacked at `/`). */
  async putFiles(id: string, files: readonly { path: string; content: Buffer; mode: number }[]): Promise<void> {
    await this.#docker.getContainer(id).putArchive(tarArchive(files), { path: "/" })
  }

  /** Creates a named volume, or finds the existing one of that name as it is. */
  async createVolume(name: string, labels: Readonly<Record<string, string>>): Promise<void> {
    await this.#docker.createVolume({ Name: name, Labels: { ...labels } })
  }

  /** Removes a volume; a volume that is gone is fine, one in use rejects with the daemon's 409. */
  async removeVolume(name: string): Promise<void> {
    await this.#docker
      .getVolume(name)
      .remove({ force: true })
      .catch((error: unknown) => ifGone(error))
  }

  /** Containers, running or not, carrying `label` (`key` or `key=value`). */
  async containers(label: string): Promise<{ id: string; labels: Record<string, string> }[]> {
    const found = await this.#docker.listContainers({ all: true, filters: { label: [label] } })
    return found.map((container) => ({ id: container.Id, labels: container.Labels }))
  }

  /** Volumes carrying `label` (`key` or `key=value`). */
  async volumes(label: string): Promise<{ name: string; labels: Record<string, string> }[]> {
    const { Volumes: found } = await this.#docker.listVolumes({ filters: { label: [label] } })
    return (found ?? []).map((volume) => ({ name: volume.Name, labels: volume.Labels ?? {} }))
  }

  /**
   * The error of `what` (a task) whose daemon went away while it ran, for
   * `reason`: it names the daemon, since the task's own end (its code, if it
   * had one) was the daemon's doing.
   */
  wentAway(what: string, reason: string, cause?: unknown): SystemError {
    return new SystemError(
      `the Docker daemon at ${this.where} went away while ${what} ran (${reason}); runs started once it answers again use it`,
      { cause },
    )
  }

  /** Whether `error` says the daemon cannot be reached (refused, reset, no socket). */
  unreachable(error: unknown): boolean {
    return unreachable(error)
  }

  /** A SystemError saying what failed; when the daemon cannot be reached at all, saying that instead. */
  error(error: unknown, what: string): Error {
    if (error instanceof SystemError) return error
    const code = (error as NodeJS.ErrnoException | undefined)?.code
    if (unreachable(error)) {
      return new SystemError(`cannot reach the Docker daemon at ${this.where} (${code}); ${this.#hint}`, {
        cause: error,
      })
    }
    if (code === "EACCES") {
      return new SystemError(
        `no permission to use the Docker daemon at ${this.where}; run runnel as a user of the docker group, or run with --driver native`,
        { cause: error },
      )
    }
    return new SystemError(`${what}: ${daemonReason(error)}`, { cause: error })
  }

  /**
   * Pulls `image`, reporting one line per layer status change (not every
   * progress tick), within `timeoutMs` when given.
   */
  async pull(image: string, { progress, signal, timeoutMs }: PullOptions): Promise<void> {
    const bounded = timeoutMs === undefined ? signal : AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)])
    progress(`pulling image "${image}": the Docker host does not have it`)
    let failure: string | undefined
    try {
      const stream: NodeJS.ReadableStream = await this.#docker.pull(image, { abortSignal: bounded })
      failure = await followPull(stream, progress)
    } catch (error) {
      if (signal.aborted) throw signal.reason
      if (!bounded.aborted) {
        if (unreachable(error)) throw this.error(error, "")
        failure = daemonReason(error)
      }
    }
    if (signal.aborted) throw signal.reason
    if (bounded.aborted) failure = `no result within the task's timeout of ${timeoutMs} ms`
    if (failure !== undefined) throw new ImagePullError(image, failure)
  }
}

function createOptions(spec: ContainerSpec): Docker.ContainerCreateOptions {
  const security = spec.security ?? {}
  return {
    Image: spec.image,
    Entrypoint: [],
    Cmd: [...spec.command],
    Env: Object.entries(spec.env).map(([key, value]) => `${key}=${value}`),
    WorkingDir: spec.workDir,
    Labels: { ...spec.labels },
    ...(security.user === undefined ? {} : { User: security.user }),
    AttachStdout: spec.output === "attach",
    AttachStderr: spec.output === "attach",
    HostConfig: {
      Binds: spec.mounts.map((mount) => `${mount.volume}:${mount.path}${mount.readOnly === true ? ":ro" : ""}`),
      // No rotation of kept output: a follower of `docker logs -f` loses what a rotation moves away
      // (measured: 12 of 20 MB arrived with the local driver's default 20 MB files).
      LogConfig:
        spec.output === "attach" ? { Type: "none", Config: {} } : { Type: "local", Config: { "max-size": "100g" } },
      CapDrop: [...(security.dropCapabilities ?? [])],
      CapAdd: [...(security.addCapabilities ?? [])],
      SecurityOpt: security.noNewPrivileges === true ? ["no-new-privileges"] : [],
      Privileged: security.privileged === true,
      ReadonlyRootfs: security.readOnlyRootFilesystem === true,
      // No swap beyond the limit, as a kubelet's containers: past it the container is OOM-killed.
      ...(spec.memoryBytes === undefined ? {} : { Memory: spec.memoryBytes, MemorySwap: spec.memoryBytes }),
      ...(spec.nanoCpus === undefined ? {} : { NanoCpus: spec.nanoCpus }),
      ...(spec.cpuShares === undefined ? {} : { CpuShares: spec.cpuShares }),
    },
  }
}

type PullEvent = { status?: string; id?: string; error?: string; errorDetail?: { message?: string } }

/** Reads the daemon's JSON lines; resolves with the error it reported, if any. */
async function followPull(stream: NodeJS.ReadableStream, print: (line: string) => void): Promise<string | undefined> {
  const lastStatus = new Map<string, string>()
  let failure: string | undefined
  let pending = ""
  stream.setEncoding("utf8")
  for await (const chunk of stream) {
    const lines = (pending + String(chunk)).split("\n")
    pending = lines.pop() ?? ""
    for (const line of lines) {
      if (line.trim() === "") continue
      const event = JSON.parse(line) as PullEvent
      if (event.error !== undefined) failure = event.errorDetail?.message ?? event.error
      if (event.status === undefined) continue
      const key = event.id ?? ""
      if (lastStatus.get(key) === event.status) continue
      lastStatus.set(key, event.status)
      print(event.id === undefined ? event.status : `${event.id}: ${event.status}`)
    }
  }
  return failure
}

/**
 * dockerode reads DOCKER_HOST and friends itself and merges them under the
 * options given; every key it may take from there is set here, so the
 * address runnel chose is the one used.
 */
function clientOptions(host: string): Docker.DockerOptions {
  const fromEnvironment = { ca: undefined, cert: undefined, key: undefined, timeout: undefined, pathPrefix: "/" }
  if (host.startsWith("/") || host.startsWith("unix://")) {
    const socketPath = host.startsWith("unix://") ? host.slice("unix://".length) : host
    return { ...fromEnvironment, socketPath, host: undefined, port: undefined, protocol: "http" }
  }
  if (/^(tcp|http):\/\/[^/]/.test(host)) {
    const url = new URL(host.replace(/^tcp:/, "http:"))
    return { ...fromEnvironment, host: url.hostname, port: url.port || "2375", protocol: "http" }
  }
  throw new UnknownHostError(host)
}

/** A Docker host address that is none of the forms understood. */
export class UnknownHostError extends Error {
  constructor(host: string) {
    super(
      `Docker host "${host}" is not understood; use a socket path (/var/run/docker.sock), unix:///path, tcp://host:port or http://host:port`,
    )
    this.name = "UnknownHostError"
  }
}

/**
 * Reads Docker's multiplexed format (8-byte headers: stream, 0, 0, 0, big-endian
 * length, then that many bytes) chunk by chunk, handing on each frame's bytes as
 * views of the chunk they came in: a frame cut between chunks goes on in pieces,
 * which the sink copes with (it decodes across chunks). dockerode's demuxStream
 * copies every chunk into a buffer it joins and re-cuts: at pipe speed that made
 * ≈90 MiB of garbage buffers the collector freed only late (measured, 200 MB task).
 */
export function demuxer(output: OutputSink): (chunk: Buffer) => void {
  const header = Buffer.alloc(8)
  let headerBytes = 0
  /** Bytes left of the current frame's body. */
  let left = 0
  let stream: "stdout" | "stderr" = "stdout"
  return (chunk) => {
    let at = 0
    while (at < chunk.length) {
      if (left === 0) {
        const taken = Math.min(8 - headerBytes, chunk.length - at)
        chunk.copy(header, headerBytes, at, at + taken)
        headerBytes += taken
        at += taken
        if (headerBytes < 8) return
        headerBytes = 0
        left = header.readUInt32BE(4)
        stream = header[0] === 2 ? "stderr" : "stdout"
        continue
      }
      const end = Math.min(chunk.length, at + left)
      output[stream](chunk.subarray(at, end))
      left -= end - at
      at = end
    }
  }
}

function streamEnd(stream: NodeJS.ReadableStream): Promise<void> {
  return new Promise((resolve, reject) => {
    stream.once("end", resolve)
    stream.once("close", resolve)
    stream.once("error", reject)
  })
}

/** A ustar archive of regular files, with the directories above them. */
function tarArchive(files: readonly { path: string; content: Buffer; mode: number }[]): Buffer {
  const blocks: Buffer[] = []
  const directories = new Set<string>()
  const header = (name: string, size: number, mode: number, type: "0" | "5") => {
    const block = Buffer.alloc(512)
    block.write(name, 0, 100, "utf8")
    block.write(`${mode.toString(8).padStart(7, "0")}\0`, 100)
    block.write("0000000\0", 108)
    block.write("0000000\0", 116)
    block.write(`${size.toString(8).padStart(11, "0")}\0`, 124)
    block.write(
      `${Math.floor(Date.now() / 1000)
        .toString(8)
        .padStart(11, "0")}\0`,
      136,
    )
    block.write("        ", 148)
    block.write(type, 156)
    block.write("ustar\0", 257)
    block.write("00", 263)
    let sum = 0
    for (const byte of block) sum += byte
    block.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148)
    return block
  }
  for (const file of files) {
    const relative = file.path.replace(/^\/+/, "")
    const parts = relative.split("/")
    for (let depth = 1; depth < parts.length; depth++) {
      const directory = `${parts.slice(0, depth).join("/")}/`
      if (directories.has(directory)) continue
      directories.add(directory)
      blocks.push(header(directory, 0, 0o755, "5"))
    }
    blocks.push(header(relative, file.content.length, file.mode, "0"), file.content)
    const padding = (512 - (file.content.length % 512)) % 512
    blocks.push(Buffer.alloc(padding))
  }
  blocks.push(Buffer.alloc(1024))
  return Buffer.concat(blocks)
}

const unreachableCodes = new Set([
  "ENOENT",
  "ECONNREFUSED",
  "ECONNRESET",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ETIMEDOUT",
  "ENOTFOUND",
  "EAI_AGAIN",
])

function unreachable(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException | undefined)?.code
  return code !== undefined && unreachableCodes.has(code)
}

/** The daemon's own words: its JSON message, else dockerode's message without its "(HTTP code N) ..." prefix. */
function daemonReason(error: unknown): string {
  const message = (error as { json?: { message?: unknown } } | undefined)?.json?.message
  if (typeof message === "string") return message
  return errorMessage(error)
    .replace(/^\(HTTP code \d+\) [^-]*- /, "")
    .trim()
}

export function statusCode(error: unknown): number | undefined {
  const code = (error as { statusCode?: unknown } | undefined)?.statusCode
  return typeof code === "number" ? code : undefined
}

function ifGone(error: unknown): void {
  if (statusCode(error) !== 404) throw error
}
