import { execFile } from "node:child_process"
import { readdir, readFile } from "node:fs/promises"
import { join } from "node:path"
import { promisify } from "node:util"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { localPipelineId } from "../cli/runner.ts"
import { type CliResult, root, runnel } from "./cli.ts"
import { describeDocker, dockerAnswers, dockerHost } from "./docker.ts"
import { type Answer, call, eventually, type ServerProcess, serverProcesses } from "./server-process.ts"

// Every example in examples/yaml/ runs with bin/runnel runner on Docker, as its header says, and
// shows exactly the tasks, statuses and output written there. webhook_trigger, set_pipeline and
// resource versions kept between runs need the server: they run on a real `runnel server`.

const run = promisify(execFile)
const dockerEnv = { ...process.env, ...(dockerHost === undefined ? {} : { DOCKER_HOST: dockerHost }) }
const docker = (...args: string[]) => run("docker", args, { env: dockerEnv })

/** The custom resource type of custom-type.yml, built from examples/yaml/custom-resource. */
const resourceImage = "runnel-test-resource:1"
/** Caches are named after the pipeline (in the runner, a hash of the file's path), the job, the task and the cache's index. */
const cacheVolume = (example: string, job: string, task: string) =>
  `runnel-cache-cache-${localPipelineId(join(root, "examples", "yaml", example))}-${job}-${task}-0`
const cacheVolumes = [cacheVolume("cache.yml", "cached", "counter"), cacheVolume("attempts.yml", "retry", "flaky")]

const removeCaches = () => docker("volume", "rm", "-f", ...cacheVolumes)

const started = (path: string) => `▸ ${path} started`
const succeeded = (path: string) => `✓ ${path} success (exit 0)`
const failed = (path: string, code: number) => `✗ ${path} failure (exit ${code})`
const errored = (path: string) => `✗ ${path} error`
const aborted = (path: string) => `✗ ${path} aborted`

/** The runner's output, line by line, without durations: `✓ path success (exit 0)`, `success: 1 task (...)`. */
function lines(text: string): string[] {
  return text
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => line.replace(/ in \d+\.\d\ds/, ""))
}

async function runner(file: string): Promise<CliResult> {
  const result = await runnel(["runner", `examples/yaml/${file}`, "--driver", "docker"])
  // The images are on the daemon (busybox, the built resource type): nothing is pulled.
  expect(result.stdout + result.stderr).not.toContain("pulling image")
  return result
}

type Example = {
  file: string
  code: number
  /** Lines in this order; `sorted` compares them in any order (jobs or steps in parallel). */
  stderr: (string | ReturnType<typeof expect.stringMatching>)[]
  stdout: string[]
  sorted?: boolean
  check?: (stderr: string[]) => void
}

const sh = (job: string, n: number, name: string) => `jobs/${job}/${n}/task/${name}`

const examples: Example[] = [
  {
    file: "task.yml",
    code: 0,
    stderr: [
      started(sh("hello", 1, "say-hello")),
      succeeded(sh("hello", 1, "say-hello")),
      "success: 1 task (1 succeeded, 0 failed), exit code 0",
    ],
    stdout: ["say-hello | hello from a task, runnel"],
  },
  {
    file: "get.yml",
    code: 0,
    stderr: [
      started("jobs/show/1/get/config"),
      succeeded("jobs/show/1/get/config"),
      started(sh("show", 2, "read")),
      succeeded(sh("show", 2, "read")),
      "success: 2 tasks (2 succeeded, 0 failed), exit code 0",
    ],
    stdout: ["read | version: v1", "read | color: blue"],
  },
  {
    file: "put.yml",
    code: 0,
    stderr: [
      started("jobs/release/1/put/release"),
      succeeded("jobs/release/1/put/release"),
      started("jobs/release/2/get/release"),
      succeeded("jobs/release/2/get/release"),
      started(sh("release", 3, "read")),
      succeeded(sh("release", 3, "read")),
      "success: 3 tasks (3 succeeded, 0 failed), exit code 0",
    ],
    stdout: ["release | pushing version: 1.2.3", "read | released 1.2.3"],
  },
  {
    file: "load-var.yml",
    code: 0,
    stderr: [
      started(sh("vars", 1, "describe")),
      succeeded(sh("vars", 1, "describe")),
      started("jobs/vars/2/load_var/build"),
      succeeded("jobs/vars/2/load_var/build"),
      started(sh("vars", 3, "use")),
      succeeded(sh("vars", 3, "use")),
      "success: 3 tasks (3 succeeded, 0 failed), exit code 0",
    ],
    stdout: ["use | building 2.0.1 for linux"],
  },
  {
    file: "set-pipeline.yml",
    code: 2,
    stderr: [
      started(sh("configure", 1, "write-pipeline")),
      succeeded(sh("configure", 1, "write-pipeline")),
      started("jobs/configure/2/set_pipeline/greeter"),
      "greeter | set_pipeline needs the server: store this pipeline with runnel pipeline set and run it there",
      errored("jobs/configure/2/set_pipeline/greeter"),
      "error: jobs/configure/2/set_pipeline/greeter: set_pipeline needs the server: store this pipeline with runnel pipeline set and run it there",
      "error: 2 tasks (1 succeeded, 0 failed, 1 error), exit code 2",
    ],
    stdout: [
      "write-pipeline | jobs:",
      "write-pipeline | - name: greet",
      "write-pipeline |   plan:",
      "write-pipeline |   - task: greet",
      "write-pipeline |     config:",
      "write-pipeline |       platform: linux",
      "write-pipeline |       image_resource: {type: registry-image, source: {repository: busybox}}",
      'write-pipeline |       run: {path: echo, args: ["((greeting))"]}',
    ],
  },
  {
    file: "do.yml",
    code: 0,
    stderr: [
      started(sh("seq", 1, "first")),
      succeeded(sh("seq", 1, "first")),
      started(sh("seq", 2, "second")),
      succeeded(sh("seq", 2, "second")),
      started(sh("seq", 3, "after-both")),
      succeeded(sh("seq", 3, "after-both")),
      started(sh("seq", 4, "third")),
      succeeded(sh("seq", 4, "third")),
      "success: 4 tasks (4 succeeded, 0 failed), exit code 0",
    ],
    stdout: ["first | one", "second | two", "after-both | both done", "third | three"],
  },
  {
    file: "try.yml",
    code: 0,
    stderr: [
      started(sh("lenient", 1, "optional-lint")),
      failed(sh("lenient", 1, "optional-lint"), 1),
      started(sh("lenient", 2, "build")),
      succeeded(sh("lenient", 2, "build")),
      "success: 2 tasks (1 succeeded, 1 failed), exit code 0",
    ],
    stdout: ["optional-lint | lint found problems", "build | built anyway"],
  },
  {
    file: "in-parallel.yml",
    code: 1,
    sorted: true,
    stderr: [
      started(sh("limited", 1, "slow")),
      started(sh("limited", 2, "quick")),
      succeeded(sh("limited", 2, "quick")),
      started(sh("limited", 3, "third")),
      succeeded(sh("limited", 3, "third")),
      succeeded(sh("limited", 1, "slow")),
      started(sh("fail-fast", 1, "long-test")),
      started(sh("fail-fast", 2, "broken")),
      failed(sh("fail-fast", 2, "broken"), 1),
      aborted(sh("fail-fast", 1, "long-test")),
      "failure: 5 tasks (3 succeeded, 1 failed, 1 aborted), exit code 1",
    ],
    stdout: ["slow | slow done", "quick | quick done", "third | third done", "long-test | testing", "broken | broken"],
    check: (stderr) => {
      // limit: 2 holds the third step back until one of the first two has finished.
      const third = stderr.indexOf(started(sh("limited", 3, "third")))
      const firstDone = stderr.findIndex((line) => /^✓ jobs\/limited\/[12]\//.test(line))
      expect(firstDone).toBeGreaterThanOrEqual(0)
      expect(third).toBeGreaterThan(firstDone)
      // fail_fast: long-test is stopped after broken failed, and never-started never starts.
      expect(stderr.indexOf(aborted(sh("fail-fast", 1, "long-test")))).toBeGreaterThan(
        stderr.indexOf(failed(sh("fail-fast", 2, "broken"), 1)),
      )
    },
  },
  {
    file: "across.yml",
    code: 0,
    stderr: [
      ...[1, 2, 3, 4].flatMap((n) => [started(sh("matrix", n, "test")), succeeded(sh("matrix", n, "test"))]),
      "success: 4 tasks (4 succeeded, 0 failed), exit code 0",
    ],
    stdout: [
      "test | testing linux/amd64",
      "test | testing linux/arm64",
      "test | testing darwin/amd64",
      "test | testing darwin/arm64",
    ],
  },
  {
    file: "timeout.yml",
    code: 1,
    stderr: [
      started(sh("deadline", 1, "hang")),
      failed(sh("deadline", 1, "hang"), 137),
      started(sh("deadline", 2, "report")),
      succeeded(sh("deadline", 2, "report")),
      "failure: 2 tasks (1 succeeded, 1 failed), exit code 1",
    ],
    stdout: ["hang | waiting", "report | the hang task timed out"],
  },
  {
    file: "attempts.yml",
    code: 0,
    stderr: [
      started(sh("retry", 1, "flaky")),
      failed(sh("retry", 1, "flaky"), 1),
      started(sh("retry", 2, "flaky")),
      succeeded(sh("retry", 2, "flaky")),
      "success: 2 tasks (1 succeeded, 1 failed), exit code 0",
    ],
    stdout: ["flaky | first attempt: failed", "flaky | second attempt: passed"],
  },
  {
    file: "on-success.yml",
    code: 0,
    stderr: [
      started(sh("ship", 1, "build")),
      succeeded(sh("ship", 1, "build")),
      started(sh("ship", 2, "announce")),
      succeeded(sh("ship", 2, "announce")),
      "success: 2 tasks (2 succeeded, 0 failed), exit code 0",
    ],
    stdout: ["build | building", "announce | build passed"],
  },
  {
    file: "on-failure.yml",
    code: 1,
    stderr: [
      started(sh("check", 1, "test")),
      failed(sh("check", 1, "test"), 2),
      started(sh("check", 2, "notify")),
      succeeded(sh("check", 2, "notify")),
      "failure: 2 tasks (1 succeeded, 1 failed), exit code 1",
    ],
    stdout: ["test | 1 test failed", "notify | tests failed"],
  },
  {
    file: "on-error.yml",
    code: 2,
    stderr: [
      started(sh("broken", 1, "misconfigured")),
      errored(sh("broken", 1, "misconfigured")),
      started(sh("broken", 2, "alert")),
      succeeded(sh("broken", 2, "alert")),
      expect.stringMatching(
        /^error: jobs\/broken\/1\/task\/misconfigured: executable "\/no\/such\/program" not found in image "busybox:latest"/,
      ),
      "error: 2 tasks (1 succeeded, 0 failed, 1 error), exit code 2",
    ],
    stdout: ["alert | the pipeline needs fixing"],
  },
  {
    file: "on-abort.yml",
    code: 1,
    stderr: [
      started(sh("deploy", 1, "rollout")),
      started(sh("deploy", 2, "canary")),
      failed(sh("deploy", 2, "canary"), 1),
      aborted(sh("deploy", 1, "rollout")),
      started(sh("deploy", 3, "clean-up")),
      succeeded(sh("deploy", 3, "clean-up")),
      "failure: 3 tasks (1 succeeded, 1 failed, 1 aborted), exit code 1",
    ],
    stdout: ["rollout | rolling out", "canary | canary unhealthy", "clean-up | rolling back"],
    sorted: true,
    check: (stderr) => {
      const order = [
        failed(sh("deploy", 2, "canary"), 1),
        aborted(sh("deploy", 1, "rollout")),
        started(sh("deploy", 3, "clean-up")),
      ].map((line) => stderr.indexOf(line))
      expect(order).toEqual([...order].sort((a, b) => a - b))
    },
  },
  {
    file: "ensure.yml",
    code: 1,
    stderr: [
      started(sh("integration", 1, "test")),
      failed(sh("integration", 1, "test"), 1),
      started(sh("integration", 2, "stop-db")),
      succeeded(sh("integration", 2, "stop-db")),
      started(sh("integration", 3, "report")),
      succeeded(sh("integration", 3, "report")),
      "failure: 3 tasks (2 succeeded, 1 failed), exit code 1",
    ],
    stdout: ["test | tests failed", "stop-db | database stopped", "report | report written"],
  },
  {
    file: "artifacts.yml",
    code: 0,
    stderr: [
      started(sh("build", 1, "compile")),
      succeeded(sh("build", 1, "compile")),
      started(sh("build", 2, "package")),
      succeeded(sh("build", 2, "package")),
      "success: 2 tasks (2 succeeded, 0 failed), exit code 0",
    ],
    stdout: ["package | packaging: app v1"],
  },
  {
    file: "passed.yml",
    code: 0,
    stderr: [
      started("jobs/build/1/put/artifact"),
      succeeded("jobs/build/1/put/artifact"),
      started("jobs/build/2/get/artifact"),
      succeeded("jobs/build/2/get/artifact"),
      started("jobs/deploy/1/get/artifact"),
      succeeded("jobs/deploy/1/get/artifact"),
      started(sh("deploy", 2, "deploy")),
      succeeded(sh("deploy", 2, "deploy")),
      "success: 4 tasks (4 succeeded, 0 failed), exit code 0",
    ],
    stdout: ["artifact | pushing version: 1.4.0", "deploy | deploying 1.4.0"],
  },
  {
    file: "custom-type.yml",
    code: 0,
    stderr: [
      // No version is known yet: the get checks (task 1), then fetches (task 2).
      started("jobs/use-it/1/get/hello"),
      succeeded("jobs/use-it/1/get/hello"),
      started("jobs/use-it/2/get/hello"),
      "hello | fetching build 1",
      succeeded("jobs/use-it/2/get/hello"),
      started(sh("use-it", 3, "read")),
      succeeded(sh("use-it", 3, "read")),
      started("jobs/use-it/4/put/hello"),
      "hello | publishing build 2",
      succeeded("jobs/use-it/4/put/hello"),
      started("jobs/use-it/5/get/hello"),
      "hello | fetching build 2",
      succeeded("jobs/use-it/5/get/hello"),
      started(sh("use-it", 6, "read-again")),
      succeeded(sh("use-it", 6, "read-again")),
      "success: 6 tasks (6 succeeded, 0 failed), exit code 0",
    ],
    // The scripts' JSON answers on stdout are runnel's to read, not shown.
    stdout: ["read | hello, build 1", "read-again | hello, build 2"],
  },
  {
    file: "webhook-trigger.yml",
    code: 0,
    sorted: true,
    // A runner run is manual: webhook_trigger is not evaluated and both jobs run.
    stderr: [
      started(sh("deploy", 1, "deploy")),
      succeeded(sh("deploy", 1, "deploy")),
      started(sh("test", 1, "test")),
      succeeded(sh("test", 1, "test")),
      "success: 2 tasks (2 succeeded, 0 failed), exit code 0",
    ],
    stdout: ["deploy | deploying main", "test | testing the push"],
  },
  {
    file: "resource-versions.yml",
    code: 0,
    stderr: [
      started("jobs/bump/1/get/counter"),
      succeeded("jobs/bump/1/get/counter"),
      started(sh("bump", 2, "next")),
      succeeded(sh("bump", 2, "next")),
      started("jobs/bump/3/load_var/next"),
      succeeded("jobs/bump/3/load_var/next"),
      started("jobs/bump/4/put/counter"),
      succeeded("jobs/bump/4/put/counter"),
      started("jobs/bump/5/get/counter"),
      succeeded("jobs/bump/5/get/counter"),
      "success: 5 tasks (5 succeeded, 0 failed), exit code 0",
    ],
    stdout: ["next | 1", "counter | pushing version: 1"],
  },
]

beforeAll(async () => {
  if (!dockerAnswers) return
  await run("docker", ["build", "-q", "-t", resourceImage, "examples/yaml/custom-resource"], {
    cwd: root,
    // The classic builder uses the local busybox as it is; BuildKit would ask a registry about it.
    env: { ...dockerEnv, DOCKER_BUILDKIT: "0" },
  })
  await removeCaches()
}, 120_000)

afterAll(async () => {
  if (!dockerAnswers) return
  await removeCaches()
  await docker("rmi", "-f", resourceImage)
})

describeDocker("YAML examples with bin/runnel runner on Docker", () => {
  it.each(examples)("runs examples/yaml/$file with exit code $code", async (example) => {
    const result = await runner(example.file)
    expect(result.code, result.stderr).toBe(example.code)
    const stderr = lines(result.stderr)
    const stdout = lines(result.stdout)
    if (example.sorted === true) {
      expect([...stderr].sort()).toEqual([...example.stderr].sort())
      expect([...stdout].sort()).toEqual([...example.stdout].sort())
    } else {
      expect(stderr).toEqual(example.stderr)
      expect(stdout).toEqual(example.stdout)
    }
    example.check?.(stderr)
  })

  it("says in every example's header what it shows and how to run it", async () => {
    for (const file of [...examples.map((example) => example.file), "cache.yml"]) {
      const text = await readFile(`${root}/examples/yaml/${file}`, "utf8")
      expect(text.startsWith("# "), file).toBe(true)
      expect(text, file).toContain(`bin/runnel runner examples/yaml/${file}`)
    }
  })

  it("keeps a task's cache between two runner invocations", async () => {
    const first = await runner("cache.yml")
    expect(first.code, first.stderr).toBe(0)
    expect(lines(first.stdout)).toEqual(["counter | runs so far: 1"])
    const second = await runner("cache.yml")
    expect(second.code, second.stderr).toBe(0)
    expect(lines(second.stdout)).toEqual(["counter | runs so far: 2"])
    expect(lines(second.stderr)).toEqual([
      started(sh("cached", 1, "counter")),
      succeeded(sh("cached", 1, "counter")),
      "success: 1 task (1 succeeded, 0 failed), exit code 0",
    ])
    const { stdout } = await docker("volume", "ls", "-q", "--filter", `name=${cacheVolumes[0]}`)
    expect(stdout.trim()).toBe(cacheVolumes[0])
  })
})

describeDocker("YAML examples on runnel server --driver docker", () => {
  const servers = serverProcesses("runnel-yaml-examples-")
  let server: ServerProcess
  beforeAll(async () => {
    server = await servers.start(["--driver", "docker"])
  })
  afterAll(() => servers.cleanUp())

  const api = (method: string, path: string, body?: unknown): Promise<Answer> => call(server.url, method, path, body)

  async function store(name: string, file: string): Promise<void> {
    const content = await readFile(`${root}/examples/yaml/${file}`, "utf8")
    const answer = await api("PUT", `/api/pipelines/${name}`, { content, content_type: "yaml" })
    expect(answer.status, JSON.stringify(answer.body)).toBe(201)
    expect(answer.body.driver).toBe("docker")
  }

  async function finished(runId: string) {
    const answer = await eventually(
      () => api("GET", `/api/runs/${runId}`),
      (got) => ["success", "failure", "error", "aborted"].includes(got.body?.status),
      `run ${runId} finished`,
    )
    return answer.body
  }

  async function trigger(name: string): Promise<string> {
    const answer = await api("POST", `/api/pipelines/${name}/trigger`)
    expect(answer.status, JSON.stringify(answer.body)).toBe(202)
    return answer.body.run_id
  }

  type Task = { path: string; status: string; stdout: string; stderr: string }
  const tasks = async (runId: string): Promise<Task[]> => {
    const list: Task[] = (await api("GET", `/api/runs/${runId}/tasks`)).body
    return list
      .map(({ path, status, stdout, stderr }) => ({ path, status, stdout, stderr }))
      .sort((a, b) => a.path.localeCompare(b.path))
  }

  async function webhook(pipeline: string, payload: unknown): Promise<string> {
    const response = await fetch(`${server.url}/api/webhooks/${pipeline}`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(payload),
    })
    const body = (await response.json()) as { run_id: string }
    expect(response.status).toBe(202)
    return body.run_id
  }

  it("skips a job whose webhook_trigger is false for the webhook, and runs the others", async () => {
    await store("webhook-trigger", "webhook-trigger.yml")
    const runId = await webhook("webhook-trigger", { ref: "refs/heads/feature" })
    const runAnswer = await finished(runId)
    expect(runAnswer).toMatchObject({ status: "success", code: 0, trigger_type: "webhook" })
    expect(await tasks(runId)).toEqual([
      {
        path: "jobs/deploy/0/job/deploy",
        status: "skipped",
        stdout: "",
        stderr: 'skipped: webhook_trigger "has(payload.ref) && payload.ref == \\"refs/heads/main\\"" is false\n',
      },
      { path: "jobs/test/1/task/test", status: "success", stdout: "testing the push\n", stderr: "" },
    ])

    const mainRun = await webhook("webhook-trigger", { ref: "refs/heads/main" })
    expect(await finished(mainRun)).toMatchObject({ status: "success" })
    expect(await tasks(mainRun)).toEqual([
      { path: "jobs/deploy/1/task/deploy", status: "success", stdout: "deploying main\n", stderr: "" },
      { path: "jobs/test/1/task/test", status: "success", stdout: "testing the push\n", stderr: "" },
    ])
  })

  it("stores the pipeline a set_pipeline step names, with its vars filled in", async () => {
    await store("set-pipeline", "set-pipeline.yml")
    expect((await api("GET", "/api/pipelines/greeter")).status).toBe(404)
    const runId = await trigger("set-pipeline")
    expect(await finished(runId)).toMatchObject({ status: "success", code: 0 })
    expect((await tasks(runId)).map(({ path, status }) => ({ path, status }))).toEqual([
      { path: "jobs/configure/1/task/write-pipeline", status: "success" },
      { path: "jobs/configure/2/set_pipeline/greeter", status: "success" },
    ])
    const greeter = await api("GET", "/api/pipelines/greeter")
    expect(greeter.status).toBe(200)
    expect(greeter.body.content_type).toBe("yaml")
    expect(greeter.body.content).toContain('args: ["hello from a pipeline set by a pipeline"]')

    const greeted = await trigger("greeter")
    expect(await finished(greeted)).toMatchObject({ status: "success" })
    expect(await tasks(greeted)).toEqual([
      {
        path: "jobs/greet/1/task/greet",
        status: "success",
        stdout: "hello from a pipeline set by a pipeline\n",
        stderr: "",
      },
    ])
  })

  it("records a mock resource's version in the Pipeline's status, and the next run gets it", async () => {
    await store("resource-versions", "resource-versions.yml")
    const pipelinePath = "/k8s/apis/runnel.dev/v1alpha1/namespaces/default/pipelines/resource-versions"
    const firstRun = await trigger("resource-versions")
    expect(await finished(firstRun)).toMatchObject({ status: "success" })
    const first = await tasks(firstRun)
    expect(first.find((task) => task.path === "jobs/bump/2/task/next")?.stdout).toBe("1\n")
    const recorded = await eventually(
      () => api("GET", pipelinePath),
      (got) => got.body?.status?.resourceVersions?.counter?.run === firstRun,
      "the first run's version is in the Pipeline's status",
    )
    expect(recorded.body.status.resourceVersions.counter).toMatchObject({ version: { version: "1" }, run: firstRun })

    const secondRun = await trigger("resource-versions")
    expect(await finished(secondRun)).toMatchObject({ status: "success" })
    expect(await tasks(secondRun)).toEqual([
      { path: "jobs/bump/1/get/counter", status: "success", stdout: "", stderr: "" },
      { path: "jobs/bump/2/task/next", status: "success", stdout: "2\n", stderr: "" },
      { path: "jobs/bump/3/load_var/next", status: "success", stdout: "", stderr: "" },
      { path: "jobs/bump/4/put/counter", status: "success", stdout: "pushing version: 2\n", stderr: "" },
      { path: "jobs/bump/5/get/counter", status: "success", stdout: "", stderr: "" },
    ])
    const after = await api("GET", pipelinePath)
    expect(after.body.status.resourceVersions.counter).toMatchObject({ version: { version: "2" }, run: secondRun })
  })
})

describe("examples/yaml", () => {
  it("has a test for every example", async () => {
    const files = (await readdir(`${root}/examples/yaml`)).filter((file) => file.endsWith(".yml")).sort()
    expect(files).toEqual([...examples.map((example) => example.file), "cache.yml"].sort())
  })
})
