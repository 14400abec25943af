// The smallest pipeline: one task echoes a line, and the script logs what the task said.
//
// Run it:
//   bin/runnel runner examples/hello.ts --driver native
//   bin/runnel runner examples/hello.ts --driver docker

export const pipeline = async () => {
  const result = await runtime.run({
    name: "hello",
    image: "busybox",
    command: { path: "echo", args: ["hello from runnel"] },
  })
  console.log(`the task said: ${result.stdout.trim()}`)
}
