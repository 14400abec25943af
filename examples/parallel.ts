// Tasks started together run in parallel: three tasks each sleep one second,
// so the run takes about one second of task time, not three.
// The script then checks that every task succeeded.
//
// Run it:
//   bin/runnel runner examples/parallel.ts --driver native

export async function pipeline() {
  const names = ["one", "two", "three"]
  // Each runtime.run() call starts its task at once; Promise.all waits for all of them.
  // The tasks are tasks/1/one, tasks/2/two and tasks/3/three, in call order.
  const results = await Promise.all(
    names.map((name) =>
      runtime.run({
        name,
        image: "busybox",
        command: { path: "sh", args: ["-c", `sleep 1; echo ${name}`] },
      }),
    ),
  )
  for (const [index, result] of results.entries()) {
    const name = names[index]
    assert.equal(result.code, 0, `task ${name} failed`)
    assert.equal(result.stdout, `${name}\n`)
  }
  console.log(`all ${results.length} tasks succeeded`)
}
