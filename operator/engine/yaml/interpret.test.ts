import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { OutputStream, RunResult, TaskRecord } from "../../../lib/core/run.ts"
import type { WebhookRequest } from "../../../lib/core/webhook-request.ts"
import type { LogStore } from "../../../lib/logs/log-store.ts"
import { openSqliteLogStore } from "../../../lib/logs/sqlite-log-store.ts"
import { staticSecrets } from "../../../lib/secrets/secret-resolver.ts"
import { nativeDriverFactory } from "../../drivers/native/native-driver.ts"
import type { RunObserver } from "../run-observer.ts"
import { memoryVersions, type ResourceVersions, runYamlPipeline, type YamlDeps } from "./interpret.ts"

const dir = mkdtempSync(join(tmpdir(), "runnel-yaml-test-"))
const native = nativeDriverFactory({ workRoot: join(dir, "native"), path: "/usr/local/bin:/usr/bin:/bin" }).create({})
let store: LogStore
beforeAll(async () => {
  store = await openSqliteLogStore(join(dir, "runnel.db"))
})
afterAll(async () => {
  await store.close()
  rmSync(dir, { recursive: true, force: true })
})

class Recorder implements RunObserver {
  readonly live: string[] = []
  taskStarted(_task: TaskRecord) {}
  output(_path: string, _stream: OutputStream, text: string) {
    this.live.push(text)
  }
  taskFinished(_task: TaskRecord) {}
  runFinished(_result: RunResult) {}
}

let runs = 0
async function run(
  source: string,
  options: {
    secrets?: Record<string, string>
    signal?: AbortSignal
    versions?: ResourceVersions
    webhook?: WebhookRequest
    setPipeline?: YamlDeps["setPipeline"]
  } = {},
) {
  const observer = new Recorder()
  const result = await runYamlPipeline(
    {
      runId: `yaml-test-${++runs}`,
      pipelineId: "p1",
      pipelineName: "yaml-test",
      source,
      triggeredBy: options.webhook === undefined ? "manual" : "webhook",
      args: [],
      ...(options.webhook === undefined ? {} : { webhook: options.webhook }),
    },
    {
      driver: native,
      driverName: "native",
      store,
      secrets: staticSecrets(options.secrets ?? {}),
      observer,
      limits: { memoryMb: 64, timeoutMs: 30_000 },
      mockImage: "busybox",
      versions: options.versions ?? memoryVersions(),
      ...(options.setPipeline === undefined ? {} : { setPipeline: options.setPipeline }),
    },
    options.signal ?? new AbortController().signal,
  )
  const out = (path: string, stream: OutputStream = "stdout") => store.output(result.runId, path, stream)
  return { result, observer, out, tasks: result.tasks.map((task) => `${task.path} ${task.status}`) }
}

const config = (script: string) =>
  `{platform: linux, image_resource: {type: registry-image, source: {repository: busybox}}, run: {path: sh, args: [-c, ${JSON.stringify(script)}]}}`
/** A task step running a shell script, as a plan item (`  - ${sh(...)}`), more keys on lines indented by 4. */
const sh = (name: string, script: string, indent = 4) => `task: ${name}\n${" ".repeat(indent)}config: ${config(script)}`
/** The same as a flow mapping, for hooks. */
const hook = (name: string, script: string) => `{task: ${name}, config: ${config(script)}}`

describe("step hooks and modifiers", () => {
  it("runs on_failure and ensure after a failing task, and the job still fails", async () => {
    const { result, tasks } = await run(`
jobs:
- name: j
  plan:
  - ${sh("build", "exit 3")}
    on_success: ${hook("never", "true")}
    on_failure: ${hook("notify", "echo failed")}
    ensure: ${hook("cleanup", "true")}
  - ${sh("after", "true")}
`)
    expect(tasks).toEqual([
      "jobs/j/1/task/build failure",
      "jobs/j/2/task/notify success",
      "jobs/j/3/task/cleanup success",
    ])
    expect(result.status).toBe("failure")
    expect(result.code).toBe(1)
    expect(result.message).toBe('job "j" failed')
  })

  it("lets try absorb a failure and go on", async () => {
    const { result, tasks } = await run(`
jobs:
- name: j
  plan:
  - try: ${hook("flaky", "exit 1")}
  - ${sh("next", "true")}
`)
    expect(tasks).toEqual(["jobs/j/1/task/flaky failure", "jobs/j/2/task/next success"])
    expect(result.status).toBe("success")
    expect(result.code).toBe(0)
  })

  it("retries with attempts, each attempt its own n, and hooks once around them", async () => {
    const { result, tasks } = await run(`
jobs:
- name: j
  plan:
  - ${sh("flaky", 'test -f "$HOME/count" && exit 0; touch "$HOME/count"; exit 1')}
    attempts: 3
    on_success: ${hook("done", "true")}
  - ${sh("always-fails", "exit 2")}
    attempts: 2
`)
    expect(tasks).toEqual([
      "jobs/j/1/task/flaky failure",
      "jobs/j/2/task/flaky success",
      "jobs/j/3/task/done success",
      "jobs/j/4/task/always-fails failure",
      "jobs/j/5/task/always-fails failure",
    ])
    expect(result.status).toBe("failure")
  })

  it("fails a step that times out and fires its on_failure", async () => {
    const started = Date.now()
    const { result, tasks } = await run(`
jobs:
- name: j
  plan:
  - ${sh("slow", "sleep 5")}
    timeout: 300ms
    on_failure: ${hook("timed-out", "true")}
`)
    expect(Date.now() - started).toBeLessThan(4000)
    expect(tasks).toEqual(["jobs/j/1/task/slow failure", "jobs/j/2/task/timed-out success"])
    expect(result.status).toBe("failure")
  })

  it("fails the step when its ensure fails", async () => {
    const { result, tasks } = await run(`
jobs:
- name: ok-then-bad-ensure
  plan:
  - ${sh("build", "true")}
    ensure: ${hook("cleanup", "exit 1")}
  - ${sh("not-reached", "true")}
`)
    expect(tasks).toEqual([
      "jobs/ok-then-bad-ensure/1/task/build success",
      "jobs/ok-then-bad-ensure/2/task/cleanup failure",
    ])
    expect(result.status).toBe("failure")
  })

  // atc/exec/on_success.go and on_failure.go: on_failure wraps on_success
  // (StepPrecedence), so a failing on_success hook is a failure of the step
  // that on_failure sees; ensure (ensure_step.go) wraps everything and runs last.
  it("runs on_failure after a failing on_success hook, then ensure last, and hooks of hooks", async () => {
    const { result, tasks } = await run(`
jobs:
- name: j
  plan:
  - ${sh("build", "true")}
    ensure: ${hook("cleanup", "true")}
    on_failure:
      ${sh("notify", "exit 1", 6)}
      on_failure: ${hook("notify-failed", "true")}
      ensure: ${hook("notify-ensure", "true")}
    on_success:
      ${sh("publish", "exit 1", 6)}
      on_success: ${hook("never", "true")}
  - ${sh("not-reached", "true")}
`)
    expect(tasks).toEqual([
      "jobs/j/1/task/build success",
      "jobs/j/2/task/publish failure",
      "jobs/j/3/task/notify failure",
      "jobs/j/4/task/notify-failed success",
      "jobs/j/5/task/notify-ensure success",
      "jobs/j/6/task/cleanup success",
    ])
    expect(result.status).toBe("failure")
  })

  // atc/exec/on_failure.go returns the hook's error, and on_error.go (wrapping
  // it) then runs its hook; on_success.go hands an error on without its hook.
  it("runs on_error when an on_failure hook errors, and the step errors", async () => {
    const { result, tasks } = await run(`
jobs:
- name: j
  plan:
  - ${sh("build", "exit 1")}
    on_failure:
      task: broken
      params: {TOKEN: ((missing))}
      config: ${config("true")}
    on_error: ${hook("report", "true")}
    ensure: ${hook("cleanup", "true")}
`)
    expect(tasks).toEqual([
      "jobs/j/1/task/build failure",
      "jobs/j/2/task/broken error",
      "jobs/j/3/task/report success",
      "jobs/j/4/task/cleanup success",
    ])
    expect(result.status).toBe("error")
    expect(result.message).toContain('"missing"')
  })

  // atc/exec/retry_step.go: attempts go on after a failure or an error and the
  // last attempt's outcome is the step's; the hooks (outside attempts in
  // StepPrecedence) run once, after the last attempt.
  it("runs hooks once after the last of the attempts, with the last attempt's outcome", async () => {
    const { result, tasks } = await run(`
jobs:
- name: j
  plan:
  - task: flaky
    attempts: 3
    params: {N: ((missing))}
    config: ${config("true")}
    on_error: ${hook("errored", "true")}
    on_failure: ${hook("never", "true")}
    ensure: ${hook("cleanup", "true")}
`)
    expect(tasks).toEqual([
      "jobs/j/1/task/flaky error",
      "jobs/j/2/task/flaky error",
      "jobs/j/3/task/flaky error",
      "jobs/j/4/task/errored success",
      "jobs/j/5/task/cleanup success",
    ])
    expect(result.status).toBe("error")
  })

  it("runs in_parallel steps up to limit at once, and fail_fast interrupts the others", async () => {
    const started = Date.now()
    const { result, tasks } = await run(`
jobs:
- name: limited
  plan:
  - in_parallel:
      limit: 2
      steps:
      - ${sh("a", "sleep 0.3", 8)}
      - ${sh("b", "sleep 0.3", 8)}
      - ${sh("c", "sleep 0.3", 8)}
- name: fast
  plan:
  - in_parallel:
      fail_fast: true
      steps:
      - ${sh("fails", "sleep 0.1; exit 1", 8)}
      - ${sh("slow", "sleep 5", 8)}
        on_abort: ${hook("interrupted", "true")}
`)
    const elapsed = Date.now() - started
    expect(elapsed).toBeGreaterThanOrEqual(550)
    expect(elapsed).toBeLessThan(4000)
    expect(tasks).toEqual(
      expect.arrayContaining([
        "jobs/limited/1/task/a success",
        "jobs/limited/2/task/b success",
        "jobs/limited/3/task/c success",
        "jobs/fast/1/task/fails failure",
        "jobs/fast/2/task/slow aborted",
        "jobs/fast/3/task/interrupted success",
      ]),
    )
    expect(result.status).toBe("failure")
    expect(result.message).toBe('job "fast" failed')
  })

  it("fans out across values with ((.:var)), max_in_flight all", async () => {
    const { result, tasks, out } = await run(`
jobs:
- name: j
  plan:
  - ${sh("build", 'echo "os=$OS"')}
    params: {OS: ((.:os))}
    across:
    - var: os
      values: [linux, darwin, windows]
      max_in_flight: all
`)
    expect(result.status).toBe("success")
    expect(tasks.sort()).toEqual([
      "jobs/j/1/task/build success",
      "jobs/j/2/task/build success",
      "jobs/j/3/task/build success",
    ])
    const printed = [1, 2, 3].map((n) => out(`jobs/j/${n}/task/build`).trim()).sort()
    expect(printed).toEqual(["os=darwin", "os=linux", "os=windows"])
  })

  it("runs on_abort and ensure when the run is stopped", async () => {
    const controller = new AbortController()
    setTimeout(() => controller.abort(), 300)
    const { result, tasks } = await run(
      `
jobs:
- name: j
  plan:
  - ${sh("long", "sleep 10")}
    on_abort: ${hook("aborted-hook", "true")}
    ensure: ${hook("ensure-hook", "true")}
  - ${sh("never", "true")}
  on_abort: ${hook("job-abort-hook", "true")}
`,
      { signal: controller.signal },
    )
    expect(result.status).toBe("aborted")
    expect(result.code).toBe(130)
    expect(tasks).toEqual([
      "jobs/j/1/task/long aborted",
      "jobs/j/2/task/aborted-hook success",
      "jobs/j/3/task/ensure-hook success",
      "jobs/j/4/task/job-abort-hook success",
    ])
  })
})

describe("jobs", () => {
  /** A GitHub issues event: `eventType == 'push'` is false for it. */
  const webhook: WebhookRequest = {
    provider: "github",
    eventType: "issues",
    method: "POST",
    url: "/hook",
    headers: { "X-GitHub-Event": "issues" },
    query: {},
    body: "{}",
  }
  const pipeline = (firstScript: string) => `
resources:
- name: thing
  type: mock
jobs:
- name: second
  plan:
  - get: thing
    passed: [first]
  - ${sh("use", "cat ../../get/thing/version 2>/dev/null; true")}
- name: first
  plan:
  - get: thing
  - ${sh("build", firstScript)}
- name: unrelated
  plan:
  - ${sh("other", "true")}
`

  it("runs jobs in passed: order", async () => {
    const { result, tasks } = await run(pipeline("true"))
    expect(result.status).toBe("success")
    const order = tasks.filter((task) => task.startsWith("jobs/first") || task.startsWith("jobs/second"))
    expect(order).toEqual([
      "jobs/first/1/get/thing success",
      "jobs/first/2/task/build success",
      "jobs/second/1/get/thing success",
      "jobs/second/2/task/use success",
    ])
  })

  it("skips a job whose upstream failed, and unrelated jobs still run", async () => {
    const { result, tasks, out } = await run(pipeline("exit 1"))
    expect(result.status).toBe("failure")
    expect(result.code).toBe(1)
    expect(tasks).toContain("jobs/second/0/job/second skipped")
    expect(tasks).toContain("jobs/unrelated/1/task/other success")
    expect(tasks.some((task) => task.startsWith("jobs/second/1"))).toBe(false)
    expect(out("jobs/second/0/job/second", "stderr")).toContain('job "first" failed')
  })

  it("skips a job whose webhook_trigger is false, and does not evaluate it on manual runs", async () => {
    const source = `
jobs:
- name: deploy
  webhook_trigger: eventType == 'push'
  plan:
  - ${sh("ship", "true")}
- name: always
  plan:
  - ${sh("run", "true")}
`
    const skipped = await run(source, { webhook })
    expect(skipped.result.status).toBe("success")
    expect(skipped.tasks).toEqual(["jobs/deploy/0/job/deploy skipped", "jobs/always/1/task/run success"])
    const pushed = await run(source, { webhook: { ...webhook, eventType: "push" } })
    expect(pushed.tasks).toContain("jobs/deploy/1/task/ship success")
    const manual = await run(source)
    expect(manual.tasks).toContain("jobs/deploy/1/task/ship success")
  })

  // interface.md, "Conditional execution": a job whose webhook_trigger is false
  // is skipped and "downstream jobs still proceed"; a job skipped because its
  // own upstream failed still blocks the jobs after it.
  it("runs the jobs downstream of a job its webhook_trigger skipped, with the resource's latest version", async () => {
    const source = `
resources:
- name: thing
  type: mock
  source: {initial_version: v1}
jobs:
- name: deploy
  webhook_trigger: eventType == 'push'
  plan:
  - get: thing
- name: verify
  plan:
  - get: thing
    passed: [deploy]
  - task: check
    config: {platform: linux, image_resource: {type: mock}, inputs: [{name: thing}], run: {path: cat, args: [thing/version]}}
- name: report
  plan:
  - get: thing
    passed: [verify]
`
    const { result, tasks, out } = await run(source, { webhook })
    expect(result.status).toBe("success")
    expect(tasks).toEqual([
      "jobs/deploy/0/job/deploy skipped",
      "jobs/verify/1/get/thing success",
      "jobs/verify/2/task/check success",
      "jobs/report/1/get/thing success",
    ])
    expect(out("jobs/verify/2/task/check")).toBe("v1\n")
  })

  it("still skips the jobs after a job that was skipped because its upstream failed", async () => {
    const { tasks, out } = await run(`
jobs:
- name: a
  plan:
  - get: thing
  - ${sh("fail", "exit 1")}
- name: b
  plan:
  - get: thing
    passed: [a]
- name: c
  plan:
  - get: thing
    passed: [b]
resources:
- name: thing
  type: mock
`)
    expect(tasks).toEqual([
      "jobs/a/1/get/thing success",
      "jobs/a/2/task/fail failure",
      "jobs/b/0/job/b skipped",
      "jobs/c/0/job/c skipped",
    ])
    expect(out("jobs/c/0/job/c", "stderr")).toContain('job "b" was skipped')
  })
})

describe("artifacts and variables", () => {
  it("passes outputs to later steps, with output_mapping and input_mapping", async () => {
    const { result, tasks, out } = await run(
      `
jobs:
- name: j
  plan:
  - task: make
    output_mapping: {out: built}
    config:
      platform: linux
      image_resource: {type: registry-image, source: {repository: busybox}}
      outputs: [{name: out}]
      run: {path: sh, args: [-c, "echo hello > out/greeting"]}
  - task: read
    input_mapping: {src: built}
    config:
      platform: linux
      image_resource: {type: registry-image, source: {repository: busybox}}
      inputs: [{name: src}, {name: extra, optional: true}]
      run: {path: sh, args: [-c, "cat src/greeting; ls"], dir: .}
  - task: missing
    config:
      platform: linux
      image_resource: {type: registry-image, source: {repository: busybox}}
      inputs: [{name: nowhere}]
      run: {path: "true"}
`,
    )
    expect(tasks).toEqual(["jobs/j/1/task/make success", "jobs/j/2/task/read success", "jobs/j/3/task/missing error"])
    expect(out("jobs/j/2/task/read")).toBe("hello\nsrc\n")
    expect(result.status).toBe("error")
    expect(result.message).toContain("missing inputs: nowhere")
  })

  it("loads a var from a file with load_var and uses it as ((.:name)), redacted", async () => {
    const { result, out } = await run(`
resources:
- name: data
  type: mock
  source: {create_files: {"config.json": '{"tag": "v1.2.3"}'}}
jobs:
- name: j
  plan:
  - get: data
  - load_var: cfg
    file: data/config.json
  - ${sh("show", 'echo "tag is $TAG"')}
    params: {TAG: ((.:cfg.tag))}
`)
    expect(result.status).toBe("success")
    expect(out("jobs/j/3/task/show")).toBe("tag is ***REDACTED***\n")
  })

  it("resolves ((secret)) from the run's secrets and redacts it", async () => {
    const { result, out, observer } = await run(
      `
jobs:
- name: j
  plan:
  - ${sh("use", 'echo "token=$TOKEN"; echo "$TOKEN" >&2')}
    params: {TOKEN: ((api-token)), NESTED: {a: [1, 2]}}
  - ${sh("nested", 'echo "$NESTED"')}
    params: {NESTED: {a: [1, 2]}}
`,
      { secrets: { "api-token": "hunter2-value" } },
    )
    expect(result.status).toBe("success")
    expect(out("jobs/j/1/task/use")).toBe("token=***REDACTED***\n")
    expect(out("jobs/j/1/task/use", "stderr")).toBe("***REDACTED***\n")
    expect(out("jobs/j/2/task/nested")).toBe('{"a":[1,2]}\n')
    expect(observer.live.join("")).not.toContain("hunter2")
  })

  it("ends the run as error naming an undefined variable", async () => {
    const { result, tasks, out } = await run(`
var_sources:
- name: vs
  type: dummy
  config: {vars: {greeting: hi}}
jobs:
- name: j
  plan:
  - ${sh("ok", 'echo "$G"')}
    params: {G: ((vs:greeting))}
  - ${sh("use", "true")}
    params: {X: ((nope))}
`)
    expect(tasks).toEqual(["jobs/j/1/task/ok success", "jobs/j/2/task/use error"])
    expect(out("jobs/j/1/task/ok")).toBe("***REDACTED***\n")
    expect(result.status).toBe("error")
    expect(result.code).toBe(2)
    expect(result.message).toContain("((nope))")
    expect(out("jobs/j/2/task/use", "stderr")).toContain("undefined variable ((nope))")
  })

  it("reads a task config from a file in an artifact, with vars", async () => {
    const { result, out } = await run(
      `
jobs:
- name: j
  plan:
  - task: write
    config:
      platform: linux
      image_resource: {type: registry-image, source: {repository: busybox}}
      outputs: [{name: ci}]
      run:
        path: sh
        args:
        - -c
        - |
          o='(' c=')'
          cat > ci/task.yml <<END
          platform: linux
          image_resource: {type: registry-image, source: {repository: busybox}}
          params: {WHO: $o\${o}who$c$c}
          run: {path: sh, args: [-c, 'echo "hello \\$WHO"']}
          END
  - task: greet
    file: ci/task.yml
    vars: {who: world}
`,
    )
    expect(result.tasks.map((task) => `${task.path} ${task.status}`)).toEqual([
      "jobs/j/1/task/write success",
      "jobs/j/2/task/greet success",
    ])
    expect(out("jobs/j/2/task/greet")).toBe("hello world\n")
  })
})

describe("task artifacts, as Concourse passes them", () => {
  // concourse-ci.org task step (input_mapping, output_mapping) and task config
  // ("outputs": an output at an input's path holds the input's content).
  it("chains inputs and outputs through tasks, an output at an input's path keeping its content", async () => {
    const { result, tasks, out } = await run(`
jobs:
- name: j
  plan:
  - task: make
    config:
      platform: linux
      image_resource: {type: mock}
      outputs: [{name: repo}]
      run: {path: sh, args: [-c, "echo a > repo/a"]}
  - task: change
    input_mapping: {src: repo}
    output_mapping: {changed: built}
    config:
      platform: linux
      image_resource: {type: mock}
      inputs: [{name: src, path: work}]
      outputs: [{name: changed, path: work}]
      run: {path: sh, args: [-c, "echo b > work/b"]}
  - task: use
    config:
      platform: linux
      image_resource: {type: mock}
      inputs: [{name: built}]
      run: {path: sh, args: [-c, "cat built/a built/b"]}
`)
    expect(tasks).toEqual(["jobs/j/1/task/make success", "jobs/j/2/task/change success", "jobs/j/3/task/use success"])
    expect(result.status).toBe("success")
    expect(out("jobs/j/3/task/use")).toBe("a\nb\n")
  })

  // concourse/concourse testflight/fixtures/task_vars.yml: a task file whose
  // image type is a var; the step's params win over the file's params.
  it("fills a task file's vars before checking it, and step params win over the file's", async () => {
    const { result, out } = await run(
      `
var_sources:
- name: vs
  type: dummy
  config:
    vars: {from_source: text-from-var-source}
resources:
- name: some-resource
  type: mock
  source:
    create_files: {task.yml: ((task_content))}
jobs:
- name: j
  plan:
  - get: some-resource
  - task: run
    file: some-resource/task.yml
    vars: {image_resource_type: mock, echo_text: Hello World}
    params: {B: from-step}
`,
      {
        // As the fixture's task_content var, set with fly -v: the file's own ((vars)) stay in its text.
        secrets: {
          task_content: `platform: linux
image_resource: {type: ((image_resource_type))}
params: {A: ((echo_text)), B: from-file, C: ((vs:from_source))}
run: {path: sh, args: [-c, 'echo "$A|$B|$C"']}
`,
        },
      },
    )
    expect(result.status).toBe("success")
    expect(out("jobs/j/2/task/run")).toBe("Hello World|from-step|***REDACTED***\n")
  })
})

describe("across, as Concourse runs it", () => {
  // concourse/concourse testflight/fixtures/across.yml, unchanged but for the
  // mock's mirror_self image (the native driver runs tasks on the host).
  it("runs every combination of static and load_var values, in task args and put params", async () => {
    const { result, tasks, out } = await run(`
resources:
- name: mock
  type: mock
  source:
    create_files:
      data.yml: |
        [dynamic1, dynamic2, dynamic3, 4]

jobs:
- name: job
  plan:
  - get: mock
  - load_var: dynamic
    file: mock/data.yml
  - across:
    - var: static
      values: [static1, static2]
    - var: dynamic
      values: ((.:dynamic))
    task: print
    config:
      platform: linux
      image_resource:
        type: mock
        source: {mirror_self: true}
      run:
        path: echo
        args: ["running across ((.:static)) ((.:dynamic))"]
  - across:
    - var: dynamic
      values: ((.:dynamic))
    put: mock
    params: {version: "v_((.:dynamic))"}
`)
    expect(result.status).toBe("success")
    const printed = tasks.filter((task) => task.includes("/task/print")).map((task) => out(task.split(" ")[0] ?? ""))
    // load_var values are redacted from output (reveal: false, as Concourse with redaction on); 4 is a number.
    const hidden = "***REDACTED***"
    expect(printed).toEqual(
      ["static1", "static2"].flatMap((s) => [hidden, hidden, hidden, "4"].map((d) => `running across ${s} ${d}\n`)),
    )
    const pushed = tasks.filter((task) => task.includes("/put/mock")).map((task) => out(task.split(" ")[0] ?? ""))
    expect(pushed).toEqual([`v_${hidden}`, `v_${hidden}`, `v_${hidden}`, "v_4"].map((v) => `pushing version: ${v}\n`))
    expect(tasks).toHaveLength(2 + 8 + 4 * 2)
  })
  // concourse-ci.org across step modifier: it may sit on any step (here inside
  // try, in_parallel, on a do and on a hook), fail_fast stops the values after
  // a failure, and the values reach file paths. Hooks wrap across
  // (StepPrecedence in atc/steps.go), so a step's on_success runs once.
  it("runs across inside try, in_parallel and hooks, with fail_fast, and in file paths", async () => {
    const { result, tasks, out } = await run(`
resources:
- name: files
  type: mock
  source: {create_files: {"a.txt": "A", "b.txt": "B"}}
jobs:
- name: j
  plan:
  - get: files
  - try:
      across: [{var: num, values: [1, 2, 3], fail_fast: true}]
      ${sh("flaky", 'echo "n=$NUM"; test "$NUM" != 2', 6)}
      params: {NUM: ((.:num))}
  - in_parallel:
    - across: [{var: f, values: [a, b], max_in_flight: all}]
      do:
      - load_var: content
        file: files/((.:f)).txt
        reveal: true
      - ${sh("show", 'echo "$V"', 8)}
        params: {V: ((.:content))}
      on_success:
        across: [{var: suffix, values: [first, second]}]
        ${sh("done", 'echo "$S"', 8)}
        params: {S: ((.:suffix))}
`)
    expect(result.status).toBe("success")
    const outputs = (name: string) =>
      tasks.filter((task) => task.includes(`/task/${name} `)).map((task) => out(task.split(" ")[0] ?? ""))
    expect(tasks.filter((task) => task.includes("/task/flaky"))).toEqual([
      "jobs/j/2/task/flaky success",
      "jobs/j/3/task/flaky failure",
    ])
    expect(outputs("flaky")).toEqual(["n=1\n", "n=2\n"])
    expect(outputs("show").sort()).toEqual(["A\n", "B\n"])
    expect(outputs("done")).toEqual(["first\n", "second\n"])
  })
})

describe("vars, as Concourse resolves them", () => {
  // concourse-ci.org vars docs ("var_sources", the dummy type), vars/reference.go
  // for quoted segments, atc/exec/load_var_step.go for ((.:name.field)).
  it("resolves a dummy var source with quoted segments and a load_var value by field, redacted", async () => {
    const { result, out } = await run(`
var_sources:
- name: vals
  type: dummy
  config:
    vars:
      "dotted.name": {inner: from-dummy}
      plain: p
resources:
- name: data
  type: mock
  source: {create_files: {"conf.yml": "image: {tag: v9}\\nlist: [a, b]\\n"}}
jobs:
- name: j
  plan:
  - get: data
  - load_var: conf
    file: data/conf.yml
    reveal: true
  - ${sh("show", 'echo "$A $B $C"')}
    params: {A: ((vals:"dotted.name".inner)), B: ((.:conf.image.tag)), C: "((vals:plain))"}
`)
    expect(result.status).toBe("success")
    expect(out("jobs/j/3/task/show")).toBe("***REDACTED*** v9 ***REDACTED***\n")
  })

  it("errors naming the undefined variable, the task and the key it was used at", async () => {
    const { result, tasks, out } = await run(`
jobs:
- name: j
  plan:
  - task: t
    config:
      platform: linux
      image_resource: {type: mock}
      run: {path: echo, args: [hi, "((.:nothing))"]}
`)
    expect(tasks).toEqual(["jobs/j/1/task/t error"])
    const message =
      'undefined variable ((.:nothing)): no load_var step or across var named "nothing" ran before this step (used in config.run.args[1])'
    expect(result.message).toBe(`jobs/j/1/task/t: ${message}`)
    expect(out("jobs/j/1/task/t", "stderr")).toContain(message)
  })
})

describe("resources", () => {
  it("gets and puts a mock resource, records versions, and a later run sees them", async () => {
    const versions = memoryVersions()
    const source = (putVersion: string) => `
resources:
- name: thing
  type: mock
  source: {initial_version: first, metadata: [{name: built-by, value: runnel}]}
jobs:
- name: j
  plan:
  - get: thing
  - put: thing
    params: {version: ${putVersion}, print_metadata: true}
`
    const first = await run(source("v2"), { versions })
    expect(first.result.status).toBe("success")
    expect(first.tasks).toEqual([
      "jobs/j/1/get/thing success",
      "jobs/j/2/put/thing success",
      "jobs/j/3/get/thing success",
    ])
    expect(first.out("jobs/j/2/put/thing")).toBe("pushing version: v2\nbuilt-by: runnel\n")
    expect(versions.history("thing").map((entry) => entry.version)).toEqual([
      { version: "first" },
      { version: "v2" },
      { version: "v2" },
    ])
    const second = await run(
      `
resources:
- name: thing
  type: mock
  source: {initial_version: first}
jobs:
- name: j
  plan:
  - get: thing
  - task: show
    config:
      platform: linux
      image_resource: {type: mock, source: {mirror_self: true}}
      inputs: [{name: thing}]
      run: {path: cat, args: [thing/version]}
`,
      { versions },
    )
    expect(second.result.status).toBe("success")
    expect(second.out("jobs/j/2/task/show")).toBe("v2\n")
  })

  // concourse/concourse testflight/fixtures/recursive-resource-checking.yml, with
  // the keys atc/config.go's ResourceConfig and ResourceType accept and runnel ignores.
  it("runs a resource whose type's type's type is mock, with check_every, tags and webhook_token accepted", async () => {
    const { result, tasks, out } = await run(`
resource_types:
- name: mock-resource-parent
  type: mock
  source: {mirror_self: true, initial_version: parent-version}
  check_every: 1m
  tags: [any]
- name: mock-resource-child
  type: mock-resource-parent
  source: {mirror_self: true, initial_version: child-version}
- name: mock-resource-grandchild
  type: mock-resource-child
  source: {mirror_self: true, initial_version: grandchild-version}
resources:
- name: recursive-custom-resource
  type: mock-resource-grandchild
  source: {initial_version: hella-nested}
  check_every: never
  tags: [any]
  webhook_token: some-token
jobs:
- name: get-resource
  plan:
  - get: recursive-custom-resource
  - task: show
    config:
      platform: linux
      image_resource: {type: mock}
      inputs: [{name: recursive-custom-resource}]
      run: {path: cat, args: [recursive-custom-resource/version]}
`)
    expect(result.status).toBe("success")
    expect(tasks).toEqual([
      "jobs/get-resource/1/get/recursive-custom-resource success",
      "jobs/get-resource/2/task/show success",
    ])
    expect(out("jobs/get-resource/2/task/show")).toBe("hella-nested\n")
  })

  it("errors naming resource types whose types form a cycle", async () => {
    const { result, tasks } = await run(`
resource_types:
- name: a
  type: b
- name: b
  type: a
resources:
- name: r
  type: a
jobs:
- name: j
  plan:
  - get: r
`)
    expect(tasks).toEqual(["jobs/j/1/get/r error"])
    expect(result.message).toContain('resource types "a" -> "b" -> "a" form a cycle')
  })

  // concourse-ci.org get step ("passed", "trigger"), put step (its implicit
  // get), and concourse/mock-resource's out `file` param.
  const flow = (testB: string) => `
resources:
- name: thing
  type: mock
  source: {initial_version: v0}
jobs:
- name: build
  plan:
  - task: make-version
    config:
      platform: linux
      image_resource: {type: mock}
      outputs: [{name: out}]
      run: {path: sh, args: [-c, "echo v42 > out/ver"]}
  - put: thing
    params: {file: out/ver}
- name: test-a
  plan:
  - get: thing
    passed: [build]
    trigger: true
- name: test-b
  plan:
  - get: thing
    passed: [build]
    trigger: true
${testB}
- name: ship
  plan:
  - get: thing
    passed: [test-a, test-b]
    version: every
  - task: show
    config:
      platform: linux
      image_resource: {type: mock}
      inputs: [{name: thing}]
      run: {path: cat, args: [thing/version]}
`

  it("feeds a put's version, read from a file, through a fan-out to a fan-in get", async () => {
    const { result, tasks, out } = await run(flow(""))
    expect(result.status).toBe("success")
    expect(tasks).toEqual([
      "jobs/build/1/task/make-version success",
      "jobs/build/2/put/thing success",
      "jobs/build/3/get/thing success",
      "jobs/test-a/1/get/thing success",
      "jobs/test-b/1/get/thing success",
      "jobs/ship/1/get/thing success",
      "jobs/ship/2/task/show success",
    ])
    expect(out("jobs/ship/2/task/show")).toBe("v42\n")
  })

  it("errors a fan-in get when no version passed every job it names", async () => {
    const { result, tasks } = await run(flow("  - put: thing\n    params: {version: v43}"))
    expect(tasks).toContain("jobs/ship/1/get/thing error")
    expect(result.message).toContain(
      'no version of resource "thing" passed all of "test-a", "test-b" in this run: job "test-a" had {"version":"v42"}, job "test-b" had {"version":"v43"}',
    )
  })

  it("makes set_pipeline an error without the server, and calls it with the server", async () => {
    const source = `
jobs:
- name: j
  plan:
  - task: write
    config:
      platform: linux
      image_resource: {type: registry-image, source: {repository: busybox}}
      outputs: [{name: ci}]
      run:
        path: sh
        args:
        - -c
        - |
          o='(' c=')'
          echo "jobs: [{name: x, plan: [{task: t, file: $o\${o}f$c$c}]}] # $o\${o}keep$c$c" > ci/p.yml
  - set_pipeline: self
    file: ci/p.yml
    vars: {f: a/b.yml}
`
    const runner = await run(source)
    expect(runner.tasks).toEqual(["jobs/j/1/task/write success", "jobs/j/2/set_pipeline/self error"])
    expect(runner.result.status).toBe("error")
    expect(runner.result.message).toContain("set_pipeline needs the server")
    const stored: [string, string][] = []
    const server = await run(source, {
      setPipeline: async (name, yaml) => {
        stored.push([name, yaml])
      },
    })
    expect(server.result.status).toBe("success")
    expect(stored).toEqual([["yaml-test", "jobs: [{name: x, plan: [{task: t, file: a/b.yml}]}] # ((keep))\n"]])
  })
})
