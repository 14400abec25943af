// A task that exits non-zero does not fail the run by itself: runtime.run()
// resolves with the code, and the script decides. Here the task exits 3, the
// script checks for it, logs that it handled it, and the run succeeds (exit 0).
//
// Run it:
//   bin/runnel runner examples/failing-task.ts --driver native

export const pipeline = async () => {
  const result = await runtime.run({
    name: "check",
    image: "busybox",
    command: { path: "sh", args: ["-c", "echo about to fail >&2; exit 3"] },
  })
  assert.equal(result.code, 3, "the check task should exit 3")
  assert.containsString(result.stderr, "about to fail")
  console.log(`the check task exited ${result.code}; handled, carrying on`)
}
