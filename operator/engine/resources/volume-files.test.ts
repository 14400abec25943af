import { execFileSync } from "node:child_process"
import {
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { packDirectory, unpackArchive } from "./volume-files.ts"

// The archives runnel makes are read by busybox's tar, and busybox's tar's are read back: both checked with
// Debian's tar here, the format being the same ustar.
const dir = mkdtempSync(join(tmpdir(), "runnel-volume-files-test-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

describe("volume archives", () => {
  it("pack a tree that tar unpacks with contents, modes, links and long paths", async () => {
    const source = join(dir, "source")
    const deep = join(source, "a".repeat(60), "b".repeat(60))
    mkdirSync(deep, { recursive: true })
    writeFileSync(join(deep, "file.txt"), "deep")
    writeFileSync(join(source, "run.sh"), "#!/bin/sh\n", { mode: 0o755 })
    symlinkSync("run.sh", join(source, "link"))
    const archive = join(dir, "out.tar")
    writeFileSync(archive, await packDirectory(source))
    const target = join(dir, "unpacked")
    mkdirSync(target)
    execFileSync("tar", ["xf", archive, "-C", target])
    expect(readFileSync(join(target, "a".repeat(60), "b".repeat(60), "file.txt"), "utf8")).toBe("deep")
    expect(statSync(join(target, "run.sh")).mode & 0o777).toBe(0o755)
    expect(readlinkSync(join(target, "link"))).toBe("run.sh")
  })

  it("unpack what tar packs, and refuse entries or links that leave the directory", async () => {
    const source = join(dir, "tar-source")
    mkdirSync(join(source, ".git", "refs"), { recursive: true })
    writeFileSync(join(source, ".git", "HEAD"), "ref: refs/heads/main\n")
    symlinkSync("HEAD", join(source, ".git", "head-link"))
    const packed = execFileSync("tar", ["cf", "-", "-C", source, "."])
    const target = join(dir, "tar-target")
    await unpackArchive(packed, target)
    expect(readFileSync(join(target, ".git", "HEAD"), "utf8")).toBe("ref: refs/heads/main\n")
    expect(readlinkSync(join(target, ".git", "head-link"))).toBe("HEAD")

    const escaping = join(dir, "escaping")
    mkdirSync(escaping)
    symlinkSync("/etc/passwd", join(escaping, "config"))
    await expect(
      unpackArchive(execFileSync("tar", ["cf", "-", "-C", escaping, "."]), join(dir, "escaping-target")),
    ).rejects.toThrow('the volume\'s archive has a symbolic link "config" -> "/etc/passwd", which leaves its directory')
    const dotdot = execFileSync("tar", ["cf", "-", "-P", "--transform", "s,^,../,", "-C", source, ".git/HEAD"])
    await expect(unpackArchive(dotdot, join(dir, "dotdot-target"))).rejects.toThrow("which leaves its directory")
  })
})
