import { lstat, mkdir, readdir, readFile, readlink, symlink, writeFile } from "node:fs/promises"
import { isAbsolute, join, posix, relative } from "node:path"
import type { TaskRequest } from "../task-request.ts"

/**
 * Moving a directory tree between the operator's disk and a run volume.
 * Volumes belong to the driver (a Docker volume, a directory, a
 * PersistentVolumeClaim), not to runnel, so files travel the way every
 * driver can carry them: a ustar archive, base64 in environment variables of
 * small tasks in the mock image (busybox: sh, base64, tar), and back as a
 * task's stdout. An environment string must stay under Linux's 128 KiB per
 * string, and one task's environment well under its 2 MiB for all of them.
 */
const partChars = 96 * 1024
const partsPerTask = 8

/** Where the volume is mounted in the copying tasks. */
const mountPath = "/tmp/runnel-volume"

/** A place in a volume: the volume's run name and a relative directory inside it ("" for its root). */
export type VolumePlace = { readonly volume: string; readonly path: string }

/** The tasks that put the archive of `dir` into `place`: append its parts to a file in the volume, then unpack. */
export async function uploadTasks(
  image: string,
  dir: string,
  place: VolumePlace,
): Promise<Omit<TaskRequest, "name">[]> {
  const encoded = (await packDirectory(dir)).toString("base64")
  const staging = `.runnel-upload-${process.pid}-${Date.now()}.b64`
  const parts: string[] = []
  for (let at = 0; at < encoded.length; at += partChars) parts.push(encoded.slice(at, at + partChars))
  const tasks: Omit<TaskRequest, "name">[] = []
  for (let first = 0; first < parts.length; first += partsPerTask) {
    const env: Record<string, string> = {}
    const chunk = parts.slice(first, first + partsPerTask)
    chunk.forEach((part, index) => {
      env[`RUNNEL_PART_${index}`] = part
    })
    const appends = chunk.map((_, index) => `printf '%s' "$RUNNEL_PART_${index}"`).join("; ")
    tasks.push(task(image, `set -e; { ${appends}; } >> '${staging}'`, env))
  }
  const target = place.path === "" ? "." : place.path
  tasks.push(
    task(
      image,
      `set -e; touch '${staging}'; mkdir -p "$RUNNEL_TARGET"; base64 -d '${staging}' | tar x -C "$RUNNEL_TARGET"; rm -f '${staging}'`,
      { RUNNEL_TARGET: target },
    ),
  )
  return tasks.map((request) => ({ ...request, mounts: { [mountPath]: place.volume } }))
}

/** The task whose stdout is the base64 ustar archive of `place`, for unpackArchive. */
export function downloadTask(image: string, place: VolumePlace): Omit<TaskRequest, "name"> {
  return {
    ...task(image, `set -e; cd "$RUNNEL_SOURCE"; tar c . | base64`, {
      RUNNEL_SOURCE: place.path === "" ? "." : place.path,
    }),
    mounts: { [mountPath]: place.volume },
  }
}

function task(image: string, script: string, env: Record<string, string>): Omit<TaskRequest, "name"> {
  return { image, command: { path: "sh", args: ["-c", script] }, env, mounts: {}, workDir: mountPath }
}

/** A ustar archive of everything under `dir`: directories, regular files with their modes, symbolic links. */
export async function packDirectory(dir: string): Promise<Buffer> {
  const blocks: Buffer[] = []
  const walk = async (relative: string) => {
    const entries = await readdir(join(dir, relative), { withFileTypes: true })
    entries.sort((a, b) => (a.name < b.name ? -1 : 1))
    for (const entry of entries) {
      const name = relative === "" ? entry.name : `${relative}/${entry.name}`
      const full = join(dir, name)
      const stat = await lstat(full)
      if (entry.isDirectory()) {
        blocks.push(header(`${name}/`, stat.mode & 0o7777, 0, "5"))
        await walk(name)
      } else if (entry.isSymbolicLink()) {
        blocks.push(header(name, 0o777, 0, "2", await readlink(full)))
      } else if (entry.isFile()) {
        const content = await readFile(full)
        blocks.push(header(name, stat.mode & 0o7777, content.length, "0"), content, padding(content.length))
      }
    }
  }
  await walk("")
  blocks.push(Buffer.alloc(1024))
  return Buffer.concat(blocks)
}

function padding(size: number): Buffer {
  return Buffer.alloc((512 - (size % 512)) % 512)
}

function header(path: string, mode: number, size: number, type: "0" | "2" | "5", link = ""): Buffer {
  const block = Buffer.alloc(512)
  let name = path
  let prefix = ""
  if (Buffer.byteLength(name) > 100) {
    // ustar splits a long path at a slash: up to 155 bytes of prefix, up to 100 of name.
    const cut = path.lastIndexOf("/", path.length - 2)
    prefix = path.slice(0, cut)
    name = path.slice(cut + 1)
    if (cut < 0 || Buffer.byteLength(name) > 100 || Buffer.byteLength(prefix) > 155) {
      throw new Error(`the path ${path.slice(0, 80)}... is too long to copy into a volume (ustar: 255 bytes)`)
    }
  }
  block.write(name, 0, 100)
  block.write(octal(mode, 7), 100)
  block.write(octal(0, 7), 108)
  block.write(octal(0, 7), 116)
  block.write(octal(size, 11), 124)
  block.write(octal(0, 11), 136)
  block.write("        ", 148)
  block.write(type, 156)
  block.write(link, 157, 100)
  block.write("ustar\u000000", 257)
  block.write(prefix, 345, 155)
  let sum = 0
  for (const byte of block) sum += byte
  block.write(`${sum.toString(8).padStart(6, "0")}\u0000 `, 148)
  return block
}

function octal(value: number, width: number): string {
  return `${value.toString(8).padStart(width, "0")}\u0000`
}

/**
 * Writes the files of a ustar archive (as busybox's tar makes them) under
 * `dir`. Entries that would leave `dir` are refused; symbolic links are made
 * last, so no file is ever written through one.
 */
export async function unpackArchive(archive: Buffer, dir: string): Promise<void> {
  const links: [string, string][] = []
  let longName: string | undefined
  for (let at = 0; at + 512 <= archive.length; ) {
    const block = archive.subarray(at, at + 512)
    if (block.every((byte) => byte === 0)) break
    const field = (start: number, length: number) => {
      const raw = block.subarray(start, start + length)
      const end = raw.indexOf(0)
      return raw.subarray(0, end < 0 ? length : end).toString("utf8")
    }
    const size = Number.parseInt(field(124, 12).trim() || "0", 8)
    const type = field(156, 1) || "0"
    const prefix = field(345, 155)
    const content = archive.subarray(at + 512, at + 512 + size)
    at += 512 + size + ((512 - (size % 512)) % 512)
    if (type === "L") {
      longName = content.toString("utf8").replace(/\0+$/, "")
      continue
    }
    const path = longName ?? (prefix === "" ? field(0, 100) : `${prefix}/${field(0, 100)}`)
    longName = undefined
    const relative = posix
      .normalize(path)
      .replace(/^(\.\/)+/, "")
      .replace(/\/$/, "")
    if (relative === "." || relative === "") continue
    if (relative.startsWith("../") || relative === ".." || relative.startsWith("/")) {
      throw new Error(`the volume's archive names ${JSON.stringify(path)}, which leaves its directory`)
    }
    const target = join(dir, relative)
    const mode = Number.parseInt(field(100, 8).trim() || "644", 8) & 0o7777
    if (type === "5") await mkdir(target, { recursive: true, mode: mode | 0o700 })
    else if (type === "2") links.push([field(157, 100), target])
    else if (type === "0" || type === "7") {
      await mkdir(join(target, ".."), { recursive: true })
      await writeFile(target, content, { mode: mode | 0o600 })
    }
  }
  for (const [link, target] of links) {
    // A link out of `dir` would let what a task wrote make the operator read its own files (a push reads `.git`).
    const resolved = join(target, "..", link)
    if (isAbsolute(link) || relative(dir, resolved).startsWith("..")) {
      throw new Error(
        `the volume's archive has a symbolic link ${JSON.stringify(relative(dir, target))} -> ${JSON.stringify(link)}, which leaves its directory`,
      )
    }
    await mkdir(join(target, ".."), { recursive: true })
    await symlink(link, target)
  }
}
