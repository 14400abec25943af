import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { runnel } from "./cli.ts"
import { describeDocker } from "./docker.ts"

// Per-task resources (runtime.run's `resources`, YAML's `container_limits`) and `privileged`, as a user
// of `runnel runner` meets them: the messages of bad values, the server's refusal, what each driver does.

const dir = mkdtempSync(join(tmpdir(), "runnel-task-limits-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

function pipelineFile(name: string, source: string): string {
  const path = join(dir, name)
  writeFileSync(path, source)
  return path
}

/** A script running one busybox task with `more` (source text) among its fields, printing its code and stderr. */
const script = (command: string, more: string) => `export const pipeline = async () => {
  const result = await runtime.run({ name: "b", image: "busybox", command: { path: "sh", args: ["-c", ${JSON.stringify(command)}] }, ${more} })
  console.log("code " + result.code)
}
`

const yaml = (command: string, more: string) => `jobs:
- name: j
  plan:
  - task: t
${more}
    config:
      platform: linux
      image_resource: {type: registry-image, source: {repository: busybox}}
      run: {path: sh, args: [-c, ${JSON.stringify(command)}]}
`

describe("runtime.run resources and privileged on bad input", () => {
  it.each([
    [
      'resources: { memory: "lots" }',
      'resources.memory is "lots" (string); give bytes as a whole number or a quantity',
    ],
    ["resources: { memory: -5 }", "resources.memory is -5 (number); give bytes"],
    ["resources: { memory: 1.5 }", "resources.memory is 1.5 (number); give bytes as a whole number"],
    [
      'resources: { cpu: "-1" }',
      'resources.cpu is "-1" (string); give CPUs as a number or a quantity of at least "1m"',
    ],
    ["resources: { cpu: true }", "resources.cpu is true (boolean); give CPUs"],
    ['resources: { cpu: "0.0001" }', 'resources.cpu is "0.0001" (string)'],
    ["resources: { gpu: 1 }", "resources takes cpu and memory, not gpu"],
    ['resources: "big"', "resources must be an object"],
    ['privileged: "yes"', 'privileged is "yes" (string); write true or false'],
  ])("fails the run on %s, naming the task and the field", async (field, message) => {
    const result = await runnel(["runner", pipelineFile("bad.ts", script("true", field)), "--driver", "native"])
    expect(result.code).toBe(1)
    expect(result.stderr).toContain(`runtime.run: task "b": ${message}`)
    expect(result.stderr).not.toMatch(/\n\s+at .+:\d+:\d+/)
  })

  it("refuses a YAML container_limits value at once, with its line", async () => {
    const file = pipelineFile("bad-limits.yml", yaml("true", "    container_limits: {memory: lots}"))
    const result = await runnel(["runner", file, "--driver", "native"])
    expect(result.code).toBe(2)
    expect(result.stderr).toContain("memory: must be a number of bytes or a size such as 512MB or 1GB")
    expect(result.stderr).toMatch(/line 5/)
  })
})

describe("privileged tasks on runnel runner --driver native", () => {
  it.each([
    [
      "a script's task without --allow-privileged-tasks, naming the flag",
      "privileged.ts",
      script("echo ran", "privileged: true"),
      {},
      'task "tasks/1/b" asks to run privileged, which is not allowed here; run runnel runner with --allow-privileged-tasks to allow it',
    ],
    [
      "a YAML task step's privileged: true alike",
      "privileged.yml",
      yaml("echo ran", "    privileged: true"),
      {},
      'task "jobs/j/1/task/t" asks to run privileged, which is not allowed here',
    ],
    [
      "one allowed by CI_ALLOW_PRIVILEGED_TASKS, saying the native driver cannot run it",
      "privileged-allowed.ts",
      script("echo ran", "privileged: true"),
      { CI_ALLOW_PRIVILEGED_TASKS: "true" },
      'task "tasks/1/b" asks to run privileged, which the native driver cannot do: its tasks are processes of runnel\'s own user; run with --driver docker or kubernetes',
    ],
  ])("refuses %s, ending the run in error before the task runs", async (_, name, source, env, message) => {
    const result = await runnel(["runner", pipelineFile(name, source), "--driver", "native"], { env })
    expect(result.code).toBe(2)
    expect(result.stdout).not.toContain("ran")
    expect(result.stderr).toContain(message)
  })

  it("says on the task's stderr that it does not enforce resources, and runs the task", async () => {
    const file = pipelineFile("native-limits.ts", script("echo ran", 'resources: { memory: "16Mi", cpu: "500m" }'))
    const result = await runnel(["runner", file, "--driver", "native"])
    expect(result.code).toBe(0)
    expect(result.stdout).toContain("ran")
    expect(result.stdout).toContain("code 0")
    expect(result.stderr).toContain(
      "runnel: the native driver does not enforce resources; the task runs without limits",
    )
  })
})

describeDocker("task limits on runnel runner --driver docker", () => {
  const oom = "head -c 64m /dev/zero | tail"

  it("kills a script's task past resources.memory; the script sees 137 and the user the reason", async () => {
    const file = pipelineFile("oom.ts", script(oom, 'resources: { memory: "16Mi" }'))
    const result = await runnel(["runner", file])
    expect(result.code).toBe(0) // the script decides: it printed the code and returned
    expect(result.stdout).toContain("code 137")
    expect(result.stderr).toContain(
      "runnel: the task used more memory than its limit of 16Mi and was killed (OOMKilled)",
    )
  })

  it("ends a YAML task past container_limits.memory as a failure with the reason", async () => {
    const file = pipelineFile("oom.yml", yaml(oom, "    container_limits: {memory: 16MB}"))
    const result = await runnel(["runner", file])
    expect(result.code).toBe(1)
    expect(result.stderr).toContain(
      "runnel: the task used more memory than its limit of 16Mi and was killed (OOMKilled)",
    )
    expect(result.stderr).toMatch(/✗ jobs\/j\/1\/task\/t failure/)
  })

  it("lets a task's container_limits in its config hold when the step gives none, and the step's win when it does", async () => {
    const memoryFile = "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"
    const source = `jobs:
- name: j
  plan:
  - task: from-config
    config: &config
      platform: linux
      image_resource: {type: registry-image, source: {repository: busybox}}
      container_limits: {memory: 32MB}
      run: {path: sh, args: [-c, ${JSON.stringify(memoryFile)}]}
  - task: from-step
    container_limits: {memory: 48MB}
    config: *config
`
    const result = await runnel(["runner", pipelineFile("limits-order.yml", source)])
    expect(result.code).toBe(0)
    expect(result.stdout).toMatch(/33554432\n[\s\S]*50331648\n/)
  })

  // With the flag the task reaches Docker privileged: it mounts a tmpfs, which an unprivileged task
  // cannot, or (a daemon inside a container, as on runnel's build machines) the runtime says in its
  // own words that it cannot grant every capability.
  it("passes a privileged task to Docker with --allow-privileged-tasks", async () => {
    const file = pipelineFile(
      "docker-privileged-ok.ts",
      script("mount -t tmpfs none /mnt && echo mounted", "privileged: true"),
    )
    const result = await runnel(["runner", file, "--allow-privileged-tasks"])
    expect(result.stderr).not.toContain("not allowed here")
    if (result.code === 0) expect(result.stdout).toContain("mounted")
    else expect(result.stderr).toMatch(/could not start in image "busybox": .*(apply caps|operation not permitted)/)
  })
})
