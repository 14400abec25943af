import { spawn } from "node:child_process"
import { access, constants } from "node:fs/promises"
import { posix } from "node:path"

/**
 * Running a native task in a private mount namespace, so its volumes are at
 * the absolute paths it asked for (`/data/file.txt` reaches the volume mounted
 * at `/data`), as in a container; nothing of it is seen outside the task.
 *
 * `unshare --mount --user --map-root-user` gives the task a user namespace of
 * its own, in which it may mount without privileges on the host. In it, a
 * shell builds a new root on a tmpfs: every directory on the way to a mount
 * path is a "shadow" holding bind mounts of the host directory's entries (so
 * the host stays visible, read-write, as without the namespace), the missing
 * directories are made in the tmpfs, each volume is bound at its path, and the
 * task runs chrooted there. The task runs as root of its namespace, which is
 * the host user that runs runnel.
 *
 * The host may refuse (no `unshare`, user namespaces disabled, seccomp): then
 * mountNamespace() answers the reason, and the driver refuses the mounts it
 * cannot place, saying to use the docker driver.
 */
export type MountNamespace = { readonly ok: true } | { readonly ok: false; readonly reason: string }

/** Whether `unshare` (at `executable`) can make a mount and a user namespace here. */
export function probeMountNamespace(executable: string, path: string): Promise<MountNamespace> {
  return new Promise((resolve) => {
    const child = spawn(executable, [...unshareArgs, "true"], {
      stdio: ["ignore", "ignore", "pipe"],
      env: { PATH: path },
    })
    let stderr = ""
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString()
    })
    child.once("error", (error) => resolve({ ok: false, reason: `${executable}: ${error.message}` }))
    child.once("close", (code) =>
      resolve(code === 0 ? { ok: true } : { ok: false, reason: stderr.trim() || `${executable} exited with ${code}` }),
    )
  })
}

const unshareArgs = ["--mount", "--user", "--map-root-user"] as const

/**
 * The shell that builds the new root at $1 and binds each volume (pairs of
 * host directory and container path, up to `--`, outer ones first), then
 * runs the command (after `--`: its working directory as a container path,
 * then the program and its arguments) chrooted there. The pipeline's text never enters it: every value
 * is an argument.
 */
const script = `set -e
# mount, mountpoint and chroot may be in sbin, which the task's PATH may lack; the task gets its own PATH back.
task_path=$PATH
PATH=/usr/sbin:/sbin:/usr/bin:/bin:$PATH
chroot=$(command -v chroot)
new=$1; shift
mount --make-rprivate /
mount -t tmpfs runnel-task-root "$new"
# An entry removed since it was listed (other programs' temporary files) is skipped; any other failure stops.
bind() {
  mount "$1" "$2" "$3" 2>/dev/null || [ ! -e "$2" ] || mount "$1" "$2" "$3"
}
shadow() {
  mkdir -p "$new$1"
  for e in "$1"/* "$1"/.[!.]* "$1"/..?*; do
    [ -e "$e" ] || [ -L "$e" ] || continue
    t="$new$e"
    if [ -e "$t" ] || [ -L "$t" ]; then continue; fi
    if [ -L "$e" ]; then ln -s "$(readlink "$e")" "$t"
    elif [ -d "$e" ]; then mkdir "$t"; bind --rbind "$e" "$t"
    else : > "$t"; bind --bind "$e" "$t"; fi
  done
  # The host directory holding the new root brings a copy of it (and its mounts) along, and a
  # directory that is a mount point in any copy cannot be removed below: detach the copy.
  if mountpoint -q "$new$new"; then umount -l "$new$new"; fi
}
shadow /
# Makes directory $1 in the new root. A host directory on the way, bound whole, is first replaced by a
# shadow of its entries, so what is made below it does not reach the host; below a volume already
# bound (a mount inside another) the directory is made in that volume, as a container runtime does.
volumes=" "
place() {
  at=""; rest=\${1#/}
  while [ -n "$rest" ]; do
    part=\${rest%%/*}
    if [ "$part" = "$rest" ]; then rest=""; else rest=\${rest#*/}; fi
    at="$at/$part"
    case "$volumes" in *" $at "*) break ;; esac
    if [ -n "$rest" ] && [ -d "$at" ] && [ ! -L "$at" ] && mountpoint -q "$new$at"; then
      umount -l "$new$at"; rmdir "$new$at"; shadow "$at"
    fi
  done
  mkdir -p "$new$1"
}
while [ "$1" != "--" ]; do
  volume=$1; target=$2; shift 2
  place "$target"
  mount --bind "$volume" "$new$target"
  volumes="$volumes$target "
done
shift
cwd=$1; shift
place "$cwd"
PATH=$task_path
exec "$chroot" "$new" sh -c 'cd "$0" && exec "$@"' "$cwd" "$@"`

/**
 * The program and arguments that run `command` in a namespace with `binds` (container path to host
 * directory; a bind inside another after it), in `workDir`, a container path.
 */
export function inMountNamespace(
  executable: string,
  newRoot: string,
  binds: readonly { readonly path: string; readonly dir: string }[],
  workDir: string,
  command: { readonly path: string; readonly args: readonly string[] },
): { path: string; args: string[] } {
  return {
    path: executable,
    args: [
      ...unshareArgs,
      "sh",
      "-c",
      script,
      "sh",
      newRoot,
      ...binds.flatMap(({ path, dir }) => [dir, path]),
      "--",
      workDir,
      command.path,
      ...command.args,
    ],
  }
}

/**
 * Whether `executable` can be run with `path` as PATH, checked on the host before the task starts (a
 * missing one would be only exit code 127 from the shell that starts it). A relative path with a slash
 * is found from `cwd`; without one (inside a namespace, which makes the working directory) it is taken.
 */
export async function findExecutable(executable: string, path: string | undefined, cwd?: string): Promise<boolean> {
  if (executable.includes("/") && !executable.startsWith("/")) {
    return (
      cwd === undefined ||
      (await access(posix.join(cwd, executable), constants.X_OK).then(
        () => true,
        () => false,
      ))
    )
  }
  const candidates = executable.startsWith("/")
    ? [executable]
    : (path ?? "")
        .split(":")
        .filter((dir) => dir !== "")
        .map((dir) => posix.join(dir, executable))
  for (const candidate of candidates) {
    if (
      await access(candidate, constants.X_OK).then(
        () => true,
        () => false,
      )
    )
      return true
  }
  return false
}
