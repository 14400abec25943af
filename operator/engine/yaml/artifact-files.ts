import { posix } from "node:path"
import { SystemError } from "../../../lib/core/errors.ts"
import type { TaskRequest } from "../task-request.ts"
import type { Outcome, Scope, TaskSlot } from "./scope.ts"
import { buildDir, execTask } from "./task-exec.ts"

/**
 * Reading a file from an artifact (`artifact/path/in/it.yml`): artifacts are
 * volumes of the driver, not files runnel can open, so a small task in the
 * mock image prints the file and runnel captures its stdout (neither stored
 * nor shown). The artifact is mounted as the task's working directory.
 */
export function fileRequest(scope: Scope, file: string): Omit<TaskRequest, "name"> {
  const slash = file.indexOf("/")
  const artifactName = slash < 0 ? file : file.slice(0, slash)
  const inside = slash < 0 ? "" : posix.normalize(file.slice(slash + 1))
  if (inside === "" || inside === "." || inside.startsWith("../")) {
    throw new SystemError(`"${file}" names no file in an artifact; write ARTIFACT/PATH, for example repo/ci/vars.yml`)
  }
  const artifact = scope.artifacts.get(artifactName)
  if (artifact === undefined) {
    const known = [...scope.artifacts.keys()]
    throw new SystemError(
      `missing inputs: ${artifactName} (for file "${file}"); ${known.length === 0 ? "no artifact exists yet in this job" : `artifacts so far: ${known.join(", ")}`}`,
    )
  }
  const dir = posix.join(buildDir(), artifactName)
  return {
    image: scope.state.shared.deps.mockImage,
    command: { path: "cat", args: ["--", inside] },
    env: {},
    mounts: { [dir]: artifact.volume },
    workDir: dir,
  }
}

/** Reads a file as runnel's own step (load_var, set_pipeline): the task is the step's, recorded at `slot`. */
export async function readFileTask(
  scope: Scope,
  slot: TaskSlot,
  file: string,
): Promise<{ outcome: Outcome; text?: string }> {
  const run = await execTask(scope, slot, fileRequest(scope, file), { captureStdout: true })
  if (run.outcome !== "success" || run.result === undefined) return { outcome: run.outcome }
  return { outcome: "success", text: run.result.stdout }
}

/** Reads a file for another step (a task's `file:`): not a task of the job; throws when it cannot. */
export async function readArtifactFile(
  scope: Scope,
  slot: TaskSlot,
  file: string,
  internalPath: string,
): Promise<string> {
  const run = await execTask(scope, slot, fileRequest(scope, file), { captureStdout: true, internalPath })
  if (run.outcome === "aborted") throw scope.signal.reason
  if (run.result === undefined) throw new SystemError(`could not read "${file}"`)
  if (run.result.code !== 0) {
    throw new SystemError(`could not read "${file}": ${run.result.stderr.trim() || `exit code ${run.result.code}`}`)
  }
  return run.result.stdout
}
