// A script that throws fails the run: status failure, exit code 1. The error's
// message and the line of this file that threw are recorded with the run.
//
// Run it (it exits 1 on purpose):
//   bin/runnel runner examples/throwing.ts --driver native

export default async () => {
  const result = await runtime.run({
    name: "version",
    image: "busybox",
    command: { path: "echo", args: ["version: 1.4.0-dev"] },
  })
  console.log(`found ${result.stdout.trim()}`)
  throw new Error("deploy refused: version is not tagged")
}
