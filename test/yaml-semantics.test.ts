import { readdir, readFile } from "node:fs/promises"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { root } from "./cli.ts"
import { describeDocker, dockerAnswers } from "./docker.ts"
import { type Answer, call, eventually, runToEnd, type ServerProcess, serverProcesses } from "./server-process.ts"

// Issue 19: Concourse's semantics, shown by the pipelines in examples/yaml/concourse (one or more per
// group of the issue) and examples/yaml/testflight (pipelines in the shapes of concourse/concourse
// testflight/fixtures, written anew), each stored unchanged on one real `runnel server` and run on
// Docker (busybox, no registry) and on the native driver where the image does not matter. Each case
// names the Concourse page or source file whose behaviour it shows. All runs of a driver start
// together; each test waits for its own.

type Task = { path: string; status: string; stdout: string; stderr: string }
type Driver = "docker" | "native"

type Case = {
  file: string
  /** The Concourse document or source file the expected outcome follows. */
  follows: string
  status: "success" | "failure" | "error"
  /** Every task as `path status`. */
  tasks: string[]
  /** Tasks started together by in_parallel or across get their n in the order they start: compare without it. */
  unordered?: boolean
  /** Exact stdout of some tasks. */
  stdout?: Record<string, string>
  /** More checks: the tasks, and the run as GET /api/runs/:id answers it. */
  check?: (tasks: Task[], run: Answer["body"]) => void
}

/**
 * `job`'s tasks in the order they ran, n counted from 1: each `kind/name`, or `kind/name status`
 * when it did not succeed.
 */
const inOrder = (job: string, ...steps: string[]) =>
  steps.map((step, i) => {
    const [path, status = "success"] = step.split(" ")
    return `jobs/${job}/${i + 1}/${path} ${status}`
  })
const task = (job: string, n: number, name: string) => `jobs/${job}/${n}/task/${name}`
const stderrOf = (tasks: Task[], path: string) => tasks.find((t) => t.path === path)?.stderr ?? ""

const cases: Case[] = [
  // Group 1: unknown top-level keys.
  {
    file: "concourse/top-level-keys.yml",
    follows: "concourse/concourse atc/config.go (UnmarshalConfig keeps only known top-level keys)",
    status: "success",
    tasks: inOrder("anchored", "task/build", "task/test"),
    stdout: {
      [task("anchored", 1, "build")]: "built from an anchor\n",
      [task("anchored", 2, "test")]: "tested from an anchor\n",
    },
  },
  // Group 2: across with its modifiers, inside try, do, in_parallel and a hook.
  {
    file: "concourse/across-modifiers.yml",
    follows: "concourse-ci.org/across-step.html (max_in_flight, fail_fast, vars from load_var)",
    status: "success",
    unordered: true,
    tasks: [
      ...inOrder(
        "matrix",
        "task/list-oses",
        "load_var/oses",
        ...["linux", "darwin"].flatMap((os) =>
          ["amd64", "arm64"].flatMap((arch) => [`task/build-${os}-${arch}`, `task/check-${os}-${arch}`]),
        ),
      ),
      // fail_fast: the value after the failing one never starts; try makes the step succeed.
      ...inOrder("guarded", "task/attempt-1", "task/attempt-2 failure", "task/after-try"),
      ...inOrder("hooked", "task/main", "task/notify-email", "task/notify-chat"),
    ],
    check: (tasks) => {
      const checks = tasks.filter((t) => t.path.includes("/task/check-")).map((t) => t.stdout)
      expect(checks.sort()).toEqual(["darwin/amd64\n", "darwin/arm64\n", "linux/amd64\n", "linux/arm64\n"])
      expect(tasks.find((t) => t.path.endsWith("/notify-chat"))?.stdout).toBe("notified chat\n")
    },
  },
  {
    file: "testflight/across.yml",
    follows: "concourse/concourse testflight/fixtures/across.yml and erroring_pipeline.yml (across_test.go)",
    status: "error",
    tasks: [
      ...inOrder(
        "combinations",
        "get/values",
        "load_var/dynamic",
        ...Array(6).fill("task/print"),
        ...["put/values", "get/values", "put/values", "get/values", "put/values", "get/values"],
      ),
      ...inOrder("erroring", "task/bad-path error"),
    ],
    check: (tasks, run) => {
      const printed = tasks.filter((t) => t.path.includes("/task/print")).map((t) => t.stdout)
      expect(printed.sort()).toEqual(
        ["one red", "one green", "one 3", "two red", "two green", "two 3"].map((pair) => `across ${pair}\n`).sort(),
      )
      const pushed = tasks.filter((t) => t.path.includes("/put/")).map((t) => t.stdout)
      expect(pushed).toEqual(["v_red", "v_green", "v_3"].map((v) => `pushing version: ${v}\n`))
      // The driver could not start it: the run's message says why.
      expect(run.error_message).toMatch(/^jobs\/erroring\/1\/task\/bad-path: executable "no-such-program-1" not found/)
    },
  },
  // Group 3: hook order.
  {
    file: "concourse/hook-order.yml",
    follows: "concourse/concourse atc/exec/on_success.go, on_failure.go, ensure_step.go, retry_step.go",
    status: "failure",
    tasks: [
      ...inOrder(
        "failing-success-hook",
        "task/build",
        "task/publish failure",
        "task/publish-failed",
        "task/step-failed",
        "task/always",
      ),
      ...inOrder("retried", "task/prepare", "task/flaky failure", "task/flaky", "task/once", "task/cleanup"),
    ],
    stdout: {
      [task("retried", 2, "flaky")]: "first attempt fails\n",
      [task("retried", 3, "flaky")]: "second attempt passes\n",
      [task("failing-success-hook", 5, "always")]: "ensure runs last\n",
    },
  },
  {
    file: "testflight/hooks.yml",
    follows: "concourse/concourse testflight/fixtures/hooks.yml (hooks_test.go)",
    status: "error",
    tasks: [
      ...inOrder("green", "task/pass", "task/step-success", "task/step-ensure", "task/job-success", "task/job-ensure"),
      ...inOrder(
        "red",
        "task/fail failure",
        "task/step-failure",
        "task/step-ensure",
        "task/job-failure",
        "task/job-ensure",
      ),
      ...inOrder(
        "broken",
        "task/error error",
        "task/step-error",
        "task/step-ensure",
        "task/job-error",
        "task/job-ensure",
      ),
    ],
    stdout: { [task("red", 4, "job-failure")]: "red job failure\n" },
  },
  {
    file: "testflight/do-and-try.yml",
    follows: "concourse/concourse testflight/fixtures/do.yml and try.yml",
    status: "success",
    tasks: [
      ...inOrder("in-order", "task/one", "task/two", "task/three"),
      ...inOrder("forgiving", "task/failing failure", "task/after"),
    ],
    stdout: { [task("in-order", 3, "three")]: "do step three\n", [task("forgiving", 2, "after")]: "still going\n" },
  },
  // Group 4: versions between jobs.
  {
    file: "concourse/versions.yml",
    follows: "concourse-ci.org/get-step.html (passed, trigger, version) and put-step.html (the implicit get)",
    status: "success",
    tasks: [
      ...inOrder("release", "task/decide-version", "put/app", "get/app", "task/after-put"),
      ...inOrder("test-unit", "get/app", "task/unit"),
      ...inOrder("test-e2e", "get/app", "task/e2e"),
      ...inOrder("ship", "get/app", "task/ship"),
      ...inOrder("pinned", "get/app", "task/pinned"),
    ],
    stdout: {
      "jobs/release/2/put/app": "pushing version: 2.0.0\n",
      [task("release", 4, "after-put")]: "app 2.0.0\n",
      [task("test-unit", 2, "unit")]: "app 2.0.0\n",
      [task("test-e2e", 2, "e2e")]: "app 2.0.0\n",
      [task("ship", 2, "ship")]: "app 2.0.0\n",
      [task("pinned", 2, "pinned")]: "app 1.0.0\n",
    },
  },
  {
    file: "testflight/passed-chain.yml",
    follows: "concourse/concourse testflight/fixtures/inputs_outputs.yml and propagation.yml",
    status: "success",
    tasks: [
      ...inOrder("first", "get/source"),
      ...inOrder("pusher", "get/source", "put/artifact", "get/artifact"),
      ...inOrder("last", "get/source", "get/artifact", "task/print-versions"),
    ],
    stdout: { [task("last", 3, "print-versions")]: "source=origin artifact=pushed-by-pusher\n" },
  },
  {
    file: "testflight/resource-versions.yml",
    follows:
      "concourse/concourse testflight/fixtures/resource-version-every.yml, resource-version-latest.yml, pinned-version.yml, many-inputs.yml, put-inputs.yml",
    status: "success",
    tasks: [
      ...["every", "latest", "pinned"].flatMap((job) => inOrder(job, "get/letters", "task/print")),
      ...inOrder("many-inputs", "get/letters", "get/numbers", "task/print-both"),
      ...inOrder("put-with-inputs", "get/letters", "get/numbers", "put/sink", "get/sink", "task/print"),
    ],
    stdout: {
      [task("every", 2, "print")]: "a\n",
      [task("latest", 2, "print")]: "a\n",
      [task("pinned", 2, "print")]: "pinned-z\n",
      [task("many-inputs", 3, "print-both")]: "letters has a, numbers has 1\n",
      [task("put-with-inputs", 5, "print")]: "sink is at a\n",
    },
  },
  {
    file: "testflight/resource-params.yml",
    follows:
      "concourse/concourse testflight/fixtures/resource-with-params.yml, image-resource-with-params.yml, container_limits.yml",
    status: "success",
    tasks: [
      ...inOrder("without-params", "get/forced", "task/print"),
      ...inOrder("with-params", "get/forced", "task/print"),
      ...inOrder("image-via-params", "get/forced", "task/in-image"),
      ...inOrder("put-get-params", "put/target", "get/target", "task/print"),
      ...inOrder("limits", "task/limited"),
      ...inOrder("image-resource-params", "task/with-image-params"),
    ],
    stdout: {
      [task("without-params", 2, "print")]: "forced-v\n",
      [task("with-params", 2, "print")]: "hello from params",
      [task("image-via-params", 2, "in-image")]: "MIRRORED_VERSION=forced-v\n",
      [task("put-get-params", 3, "print")]: "after put: made-by-get-params\n",
      [task("limits", 1, "limited")]: "limited\n",
    },
  },
  // Group 5: task artifacts.
  {
    file: "concourse/task-artifacts.yml",
    follows:
      "concourse-ci.org/tasks.html (inputs, outputs) and task-step.html (file, vars, params, input_mapping, output_mapping)",
    status: "success",
    tasks: inOrder("chain", "task/write-source", "task/compile", "task/package", "task/deploy"),
    stdout: {
      [task("chain", 2, "compile")]: "compiled: v1\n",
      [task("chain", 3, "package")]: "packaged: v1 + docs\n",
      [task("chain", 4, "deploy")]: "deploying v1 as release, to staging\n",
    },
  },
  {
    file: "testflight/task-outputs.yml",
    follows: "concourse/concourse testflight/fixtures/task-outputs.yml and optional-inputs.yml",
    status: "success",
    tasks: [
      ...inOrder("outputs", "task/produce", "task/list"),
      ...inOrder("optional", "task/make-data", "task/without-optional", "task/with-optional"),
    ],
    stdout: {
      [task("outputs", 2, "list")]: "first:\none\n\nsecond:\ntwo\n",
      [task("optional", 2, "without-optional")]: "apple\nno extra\n",
      [task("optional", 3, "with-optional")]: "apple\nextra mapped\n",
    },
  },
  {
    file: "testflight/volume-mounting.yml",
    follows: "concourse/concourse testflight/fixtures/volume-mounting.yml",
    status: "success",
    tasks: [
      ...inOrder("input-inside-output", "get/greeting", "task/nest", "task/look"),
      ...inOrder("output-at-dot", "get/greeting", "task/write", "task/read"),
      ...inOrder("input-inside-input", "get/greeting", "get/subject", "task/read-both"),
      ...inOrder("output-inside-input", "get/greeting", "task/write", "task/read"),
      ...inOrder("output-at-input-path", "get/greeting", "task/change", "task/read"),
      ...inOrder("two-inputs-one-path", "get/greeting", "get/subject", "task/read"),
      ...inOrder("same-path-different-names", "get/greeting", "task/check"),
    ],
    stdout: {
      [task("input-inside-output", 3, "look")]: "greeting\n",
      [task("output-at-dot", 3, "read")]: "top\n",
      [task("input-inside-input", 3, "read-both")]: "hello world\n",
      [task("output-inside-input", 3, "read")]: "nested\n",
      [task("output-at-input-path", 3, "read")]: "hellochanged\n",
      [task("two-inputs-one-path", 3, "read")]: "world",
      [task("same-path-different-names", 2, "check")]: "input content is there\n",
    },
  },
  // Group 6: vars.
  {
    file: "concourse/vars.yml",
    follows: "concourse-ci.org/vars.html (var_sources, ((.:local)), fields) and concourse/concourse vars/reference.go",
    status: "error",
    tasks: [
      ...inOrder("resolve", "task/describe-build", "load_var/build", "task/use"),
      ...inOrder("undefined", "task/missing error"),
    ],
    stdout: { [task("resolve", 3, "use")]: "image 1.4 from build.json\n" },
    check: (tasks) => {
      expect(stderrOf(tasks, task("undefined", 1, "missing"))).toBe(
        'undefined variable ((.:missing)): no load_var step or across var named "missing" ran before this step (used in config.run.args[0])\n',
      )
    },
  },
  {
    file: "testflight/vars.yml",
    follows:
      "concourse/concourse testflight/fixtures/var-sources.yml, load-var-step.yml, task_vars.yml (task_vars_test.go), config_params.yml",
    status: "error",
    tasks: [
      ...inOrder("var-source", "get/uses-vars", "task/check"),
      ...inOrder("load-var", "get/uses-vars", "load_var/raw", "task/check"),
      ...inOrder("task-file-vars", "get/tasks", "task/unwrap", "task/say"),
      ...inOrder("task-file-params", "get/tasks", "task/unwrap", "task/say"),
      ...inOrder("task-file-missing-var", "get/tasks", "task/unwrap", "task/say error"),
    ],
    stdout: {
      [task("task-file-vars", 3, "say")]: "hello from the-file\n",
      [task("task-file-params", 3, "say")]: "hello from the-step\n",
    },
    check: (tasks) => {
      expect(stderrOf(tasks, task("task-file-missing-var", 3, "say"))).toContain("undefined variable ((message))")
    },
  },
  // Group 7: resource types of resource types, and image_resource of a custom type.
  {
    file: "testflight/resource-types.yml",
    follows:
      "concourse/concourse testflight/fixtures/resource-types.yml, custom-resource-type.yml, recursive-resource-checking.yml, resource-type-defaults.yml, resource-type-named-as-base-type.yml",
    status: "success",
    tasks: [
      ...inOrder(
        "getter",
        "get/plain",
        "get/deep",
        "get/defaulted",
        "get/overridden",
        "get/named-mock",
        "task/print-versions",
      ),
      ...inOrder("putter", "put/pushed", "get/pushed", "task/print-version"),
      ...inOrder("image-of-a-custom-type", "task/in-custom-image"),
      ...inOrder("image-from-a-get", "get/image", "task/in-fetched-image"),
    ],
    stdout: {
      [task("getter", 6, "print-versions")]:
        "plain: plain-version\ndeep: deep-version\ndefaulted: from-defaults\noverridden: from-source\nnamed-mock: shadowed-mock\n",
      [task("putter", 3, "print-version")]: "put then got: pushed-version\n",
      [task("image-of-a-custom-type", 1, "in-custom-image")]: "MIRRORED_VERSION=image-version\n",
      [task("image-from-a-get", 2, "in-fetched-image")]: "MIRRORED_VERSION=child-version\n",
    },
    // resource-type-defaults.yml expects the type's defaults in the check, get and put of its resources.
    check: (tasks) => {
      expect(stderrOf(tasks, "jobs/getter/3/get/defaulted")).toBe("defaulted\n")
      expect(stderrOf(tasks, "jobs/getter/4/get/overridden")).toBe("defaulted\n")
      expect(stderrOf(tasks, "jobs/getter/1/get/plain")).toBe("")
    },
  },
  // Group 9: absolute paths.
  {
    file: "concourse/absolute-paths.yml",
    follows: 'concourse-ci.org/tasks.html (inputs and outputs: "Absolute paths are respected")',
    status: "success",
    tasks: inOrder("absolute", "task/write", "task/read"),
    stdout: { [task("absolute", 2, "read")]: "written at /data\n" },
  },
]

/** The drivers whose runs start: Docker's only where a daemon answers (describeDocker says what then). */
const drivers: Driver[] = dockerAnswers ? ["docker", "native"] : ["native"]
const describeOn = (driver: Driver, body: () => void) =>
  driver === "docker" ? describeDocker(`on the ${driver} driver`, body) : describe(`on the ${driver} driver`, body)
const servers = serverProcesses("runnel-yaml-semantics-")
let server: ServerProcess
/** Each case's run on each driver, started in beforeAll. */
const runs = new Map<string, Promise<{ run: Answer["body"]; tasks: Task[] }>>()
const nameOf = (file: string, driver: Driver) => `${file.replace(/\.yml$/, "").replace("/", "-")}-${driver}`
const api = (method: string, path: string, body?: unknown) => call(server.url, method, path, body)

async function store(name: string, file: string, driver: Driver): Promise<Answer> {
  const content = await readFile(`${root}/examples/yaml/${file}`, "utf8")
  const answer = await api("PUT", `/api/pipelines/${name}`, { content, content_type: "yaml", driver })
  expect(answer.status, JSON.stringify(answer.body)).toBe(201)
  return answer
}

beforeAll(async () => {
  server = await servers.start(["--driver", "native", "--max-in-flight", "8"])
  for (const driver of drivers) {
    for (const entry of cases) {
      const name = nameOf(entry.file, driver)
      await store(name, entry.file, driver)
      const run = runToEnd(server.url, name, 240_000)
      run.catch(() => {}) // awaited by its test
      runs.set(name, run)
    }
  }
}, 60_000)

afterAll(() => servers.cleanUp())

describe("Concourse semantics on runnel server", () => {
  for (const driver of ["docker", "native"] as const) {
    describeOn(driver, () => {
      for (const entry of cases) {
        it(`runs examples/yaml/${entry.file} as ${entry.follows} says`, async () => {
          const result = await runs.get(nameOf(entry.file, driver))
          if (result === undefined) throw new Error(`no run of ${entry.file}`)
          const tasks: Task[] = result.tasks
          const shown = JSON.stringify(tasks.map(({ path, status, stderr }) => ({ path, status, stderr })))
          expect(result.run.status, shown).toBe(entry.status)
          if (entry.tasks.length > 0) {
            const strip = (line: string) =>
              entry.unordered === true ? line.replace(/^(jobs\/[^/]+\/)\d+\//, "$1") : line
            const got = tasks.map((t) => strip(`${t.path} ${t.status}`)).sort()
            expect(got).toEqual(entry.tasks.map(strip).sort())
          }
          for (const [path, stdout] of Object.entries(entry.stdout ?? {})) {
            expect(tasks.find((t) => t.path === path)?.stdout, path).toBe(stdout)
          }
          entry.check?.(tasks, result.run)
        }, 240_000)
      }
    })
  }

  it("has a case for every pipeline in examples/yaml/concourse and examples/yaml/testflight", async () => {
    const files = await Promise.all(
      ["concourse", "testflight"].map(async (dir) =>
        (await readdir(`${root}/examples/yaml/${dir}`)).map((file) => `${dir}/${file}`),
      ),
    )
    const tested = [...cases.map((entry) => entry.file), "concourse/webhook-skip.yml"]
    expect(files.flat().sort()).toEqual(tested.sort())
  })

  it("notes the top-level keys it ignores when the pipeline is stored (atc/config.go)", async () => {
    const answer = await store("top-level-keys-notes", "concourse/top-level-keys.yml", "native")
    expect(answer.body.notes).toEqual([
      'line 10: top-level key "shared" ignored, as Concourse ignores it',
      'line 16: top-level key "x-templates" ignored, as Concourse ignores it',
    ])
  })

  it("refuses an unknown key inside a job or step, as Concourse's strict parse does", async () => {
    const content = `jobs:\n- name: j\n  plan:\n  - task: t\n    config: {platform: linux, image_resource: {type: mock}, run: {path: "true"}}\n    colour: blue\n`
    const answer = await api("PUT", "/api/pipelines/unknown-step-key", { content, content_type: "yaml" })
    expect(answer.status).toBe(400)
    expect(JSON.stringify(answer.body)).toContain("colour")
  })

  it("refuses an image_resource type that is neither a base type nor declared, naming it", async () => {
    const content = `jobs:\n- name: j\n  plan:\n  - task: t\n    config: {platform: linux, image_resource: {type: regsitry-image, source: {repository: busybox}}, run: {path: "true"}}\n`
    const answer = await api("PUT", "/api/pipelines/bad-image-type", { content, content_type: "yaml" })
    expect(answer.status).toBe(400)
    expect(JSON.stringify(answer.body)).toContain(
      'image_resource type \\"regsitry-image\\" is neither registry-image, docker-image, mock nor declared in resource_types; did you mean \\"registry-image\\"?',
    )
  })

  // Group 8: interface.md, "Conditional execution": a skipped job does not block the jobs after it.
  for (const driver of drivers) {
    it(`runs the jobs after a job webhook_trigger skipped, on ${driver} (examples/yaml/concourse/webhook-skip.yml)`, async () => {
      const name = nameOf("concourse/webhook-skip.yml", driver)
      await store(name, "concourse/webhook-skip.yml", driver)
      const hook = async (ref: string) => {
        const response = await fetch(`${server.url}/api/webhooks/${name}`, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ ref }),
        })
        expect(response.status).toBe(202)
        const { run_id: runId } = (await response.json()) as { run_id: string }
        const run = await eventually(
          () => api("GET", `/api/runs/${runId}`),
          (answer) => ["success", "failure", "error"].includes(answer.body?.status),
          `run ${runId} finished`,
          120_000,
        )
        const tasks: Task[] = (await api("GET", `/api/runs/${runId}/tasks`)).body
        return { status: run.body.status, tasks: tasks.map((t) => `${t.path} ${t.status}`).sort(), all: tasks }
      }
      const feature = await hook("refs/heads/feature")
      expect(feature.status).toBe("success")
      expect(feature.tasks).toEqual([
        ...inOrder("announce", "get/release", "task/announce"),
        "jobs/deploy/0/job/deploy skipped",
      ])
      expect(feature.all.find((t) => t.path === task("announce", 2, "announce"))?.stdout).toBe("announcing 1.0.0\n")
      const main = await hook("refs/heads/main")
      expect(main.status).toBe("success")
      expect(main.tasks).toEqual([
        ...inOrder("announce", "get/release", "task/announce"),
        ...inOrder("deploy", "get/release", "task/deploy"),
      ])
    }, 240_000)
  }
})
