// A release that waits for a person: build, then an approval gate, then deploy.
// Gates need a server started with the `gates` feature (docs/gates.md):
//
//   bin/runnel server --driver native --allowed-features '*,gates'
//   bin/runnel pipeline set examples/release-gate.ts
//   bin/runnel pipeline run release-gate        # prints how to approve, then waits
//   bin/runnel gate ls                          # in another terminal
//   bin/runnel gate approve <ID> -m "ship it"   # or: bin/runnel gate reject <ID>
//
// Approved, the run deploys and succeeds; rejected, or nobody approves within
// 30 minutes, the gate call throws: the rollback runs and the run fails.

// The default export leaves the name `pipeline` to runnel's global, where `pipeline.gate` lives. A script
// that exports `const pipeline` reaches the same function as its own `pipeline.gate` (types/runnel.d.ts).
export default async function release() {
  await runtime.run({ name: "build", image: "busybox", command: { path: "sh", args: ["-c", "echo built 1.4.0"] } })
  try {
    const approval = await pipeline.gate({ name: "production", message: "Deploy 1.4.0 to production?", timeout: "30m" })
    console.log(`approved by ${approval.approvedBy}${approval.comment === "" ? "" : `: ${approval.comment}`}`)
  } catch (error) {
    await runtime.run({ name: "rollback", image: "busybox", command: { path: "echo", args: ["nothing deployed"] } })
    throw error
  }
  await runtime.run({ name: "deploy", image: "busybox", command: { path: "echo", args: ["deployed 1.4.0"] } })
}
