// Native resources, fetch() and notifications. A mock resource (Concourse's
// mock) is checked and fetched into a volume that a task then reads. Given a
// URL as the run's argument, the script also reads JSON from it with fetch()
// and posts an http notification there; the token comes from a secret and is
// resolved only when the notification is sent.
//
// Run it:
//   bin/runnel runner examples/resources-and-notify.ts --driver native
//   bin/runnel runner examples/resources-and-notify.ts --driver native --secret HOOK_TOKEN=s3cret -- http://127.0.0.1:9000/ci

export async function pipeline() {
  const source = { initial_version: "1.0.0", create_files: { "release/notes.txt": "first release" } }
  const [latest] = await nativeResources.check({ type: "mock", source })
  assert.truthy(latest, "the mock resource has no version")

  const release = volumes.create({ name: "release" })
  const fetched = await nativeResources.fetch({ type: "mock", source, version: latest, destDir: release })
  const read = await runtime.run({
    name: "read-notes",
    image: "busybox",
    command: { path: "cat", args: ["release/notes.txt"] },
    mounts: { "/work": release },
    workDir: "/work",
  })
  assert.equal(read.code, 0, "the read-notes task failed")
  console.log(`fetched version ${fetched.version.version}: ${read.stdout}`)

  const url = pipelineContext.args[0]
  if (url === undefined) {
    console.log("no URL given: fetch() and notify skipped")
    return
  }
  const response = await fetch(url, { headers: { accept: "application/json" }, timeout: "10s" })
  if (!response.ok) throw new Error(`${url} answered ${response.status}`)
  const status: { healthy?: boolean } = await response.json()
  console.log(`the service says healthy: ${status.healthy}`)

  notify.setConfigs({
    ci: { type: "http", url, headers: { authorization: "secret:HOOK_TOKEN" } },
  })
  await notify.send({ name: "ci", message: `release ${fetched.version.version} is out` })
  console.log("notification sent")
}
