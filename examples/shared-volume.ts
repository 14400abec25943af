// A volume shares files between the tasks of a run: the first task writes a
// file into it, the second reads it back, and the script checks the content.
// Both tasks mount the volume at /shared and work in /shared, and use
// relative file names, so the pipeline works the same on docker and native.
//
// Run it:
//   bin/runnel runner examples/shared-volume.ts --driver native

async function pipeline() {
  const shared = volumes.create({ name: "shared" })

  const write = await runtime.run({
    name: "write",
    image: "busybox",
    command: { path: "sh", args: ["-c", "echo 'built by the first task' > message.txt"] },
    mounts: { "/shared": shared },
    workDir: "/shared",
  })
  assert.equal(write.code, 0, "the write task failed")

  const read = await runtime.run({
    name: "read",
    image: "busybox",
    command: { path: "cat", args: ["message.txt"] },
    mounts: { "/shared": shared },
    workDir: "/shared",
  })
  assert.equal(read.code, 0, "the read task failed")
  assert.equal(read.stdout, "built by the first task\n", "the read task saw other content")
  console.log("the second task read what the first one wrote")
}

export { pipeline }
