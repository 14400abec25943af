// Tasks started together run in parallel. Each of the three tasks leaves a
// mark in a shared volume and then waits, up to 30 seconds, until all three
// marks are there: the tasks can only all succeed if they run at the same
// time, so this pipeline fails on a runner that runs them one after another.
// The script then checks that every task succeeded.
//
// Run it:
//   bin/runnel runner examples/parallel.ts --driver native

export async function pipeline() {
  const names = ["one", "two", "three"]
  const marks = volumes.create({ name: "marks" })
  const waitForAll = `touch "$NAME"; for i in $(seq 300); do [ "$(ls | wc -l)" -ge ${names.length} ] && break; sleep 0.1; done`
  // Each runtime.run() call starts its task at once; Promise.all waits for all of them.
  // The tasks are tasks/1/one, tasks/2/two and tasks/3/three, in call order.
  const results = await Promise.all(
    names.map((name) =>
      runtime.run({
        name,
        image: "busybox",
        command: { path: "sh", args: ["-c", `${waitForAll}; [ "$(ls | wc -l)" -ge ${names.length} ] && echo "$NAME"`] },
        env: { NAME: name },
        mounts: { "/marks": marks },
        workDir: "/marks",
      }),
    ),
  )
  for (const [index, result] of results.entries()) {
    const name = names[index]
    assert.equal(result.code, 0, `task ${name} did not see the other tasks running beside it`)
    assert.equal(result.stdout, `${name}\n`)
  }
  console.log(`all ${results.length} tasks ran at the same time and succeeded`)
}
