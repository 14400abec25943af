// Arguments and environment: the run's arguments and two env vars go into a
// task that echoes them. GREETING is a secret reference (`secret:GREETING`):
// the task gets the real value, but every output shows ***REDACTED*** in its
// place, including the stdout the script receives.
//
// Run it (the secret is required; without it the run ends with status error):
//   bin/runnel runner examples/env-and-args.ts --driver native --secret GREETING=bonjour -- first second

export default async function pipeline() {
  const args = pipelineContext.args.length > 0 ? pipelineContext.args.join(" ") : "(none)"
  const result = await runtime.run({
    name: "show-env",
    image: "busybox",
    command: { path: "sh", args: ["-c", 'echo "args: $ARGS"; echo "target: $TARGET"; echo "greeting: $GREETING"'] },
    env: {
      ARGS: args,
      TARGET: "staging",
      GREETING: "secret:GREETING",
    },
  })
  assert.equal(result.code, 0, "the show-env task failed")
  assert.containsString(result.stdout, "greeting: ***REDACTED***")
  console.log(`the task saw ${pipelineContext.args.length} argument(s) and a redacted greeting`)
}
