import { errorMessage } from "../core/errors.ts"
import { minimumIntervalMs, scheduleTimes } from "../schedule/schedule-times.ts"
import { Checker, describe, hasVariable, isMapping, type Node } from "./checker.ts"
import { didYouMean, suggestion } from "./did-you-mean.ts"
import { childPath, loadYaml, SourceLines } from "./load.ts"
import { readContainerLimits, readTaskConfig } from "./task-config.ts"
import type {
  AcrossVar,
  Group,
  Hooks,
  Job,
  Resource,
  ResourceType,
  Schedule,
  Step,
  StepCommon,
  StepKind,
  TaskConfig,
  VarSource,
  YamlMap,
  YamlPipeline,
  YamlValue,
} from "./types.ts"
import { emptyIndex, type NameRef, type PipelineIndex, validateReferences } from "./validate.ts"
import { ProblemList } from "./yaml-pipeline-error.ts"

/** Steps nested deeper than this (through do, try, in_parallel and hooks) are refused. */
export const maxStepDepth = 64

export type ParseOptions = {
  /** Named at the start of the error message, for example the file given to `runnel runner`. */
  readonly source?: string
}

/**
 * Parses and validates a Concourse-compatible YAML pipeline as `fly
 * set-pipeline` would: every key known, every name declared once, every
 * reference resolved. Throws a YamlPipelineError (400) listing every problem
 * with its path and line. Variables are left in place: an undefined one
 * fails the run, not the store.
 */
export function parseYamlPipeline(text: string, options: ParseOptions = {}): YamlPipeline {
  const problems: ProblemList = new ProblemList()
  const loaded = loadYaml(text, problems)
  if (loaded === undefined) problems.fail(options.source)
  const reader = new PipelineReader(new Checker(loaded.lines, problems))
  const pipeline = reader.pipeline({ value: loaded.root, path: "", line: 1 })
  validateReferences(reader.index, problems, problems.empty)
  problems.throwIfAny(options.source)
  if (pipeline === undefined) problems.fail(options.source)
  return pipeline
}

/**
 * Parses and validates a task config file (a task step's `file:`, read from
 * an artifact at run time, after its `vars` are interpolated). `source` names
 * the file in the message. Throws a YamlPipelineError.
 */
export function parseTaskConfigFile(text: string, source: string): TaskConfig {
  const problems: ProblemList = new ProblemList()
  const loaded = loadYaml(text, problems)
  if (loaded === undefined) problems.fail(source)
  return taskConfigOrThrow(new Checker(loaded.lines, problems), { value: loaded.root, path: "", line: 1 }, source)
}

/**
 * Reads a task config file into plain values without checking them, so that
 * ((variables)) can be filled in where the checks would refuse them (a
 * `type: ((image_resource_type))`, as Concourse's testflight task_vars.yml
 * has) before validateTaskConfig. Only YAML syntax is checked here; throws a
 * YamlPipelineError naming `source`.
 */
export function loadTaskConfigFile(text: string, source: string): YamlValue {
  const problems: ProblemList = new ProblemList()
  const loaded = loadYaml(text, problems)
  if (loaded === undefined) problems.fail(source)
  problems.throwIfAny(source)
  return loaded.root
}

/** As parseTaskConfigFile, for a config already read into plain values (messages then carry no lines). */
export function validateTaskConfig(value: YamlValue, source: string): TaskConfig {
  const problems: ProblemList = new ProblemList()
  return taskConfigOrThrow(new Checker(new SourceLines(), problems), { value, path: "", line: 0 }, source)
}

function taskConfigOrThrow(c: Checker, root: Node, source: string): TaskConfig {
  if (root.value === null) c.problem(root, "the task config is empty; it needs platform and run")
  const config = root.value === null ? undefined : readTaskConfig(c, root)
  c.problems.throwIfAny(source)
  if (config === undefined) c.problems.fail(source)
  return config
}

const pipelineKeys = [
  "jobs",
  "resources",
  "resource_types",
  "groups",
  "var_sources",
  "display",
  "max_in_flight",
] as const
const jobKeys = [
  "name",
  "plan",
  "serial",
  "serial_groups",
  "max_in_flight",
  "webhook_trigger",
  "triggers",
  "on_success",
  "on_failure",
  "on_error",
  "on_abort",
  "ensure",
  "public",
  "disable_manual_trigger",
  "interruptible",
  "old_name",
  "build_log_retention",
  "build_logs_to_retain",
] as const
const resourceKeys = [
  "name",
  "type",
  "source",
  "icon",
  "version",
  "check_every",
  "check_timeout",
  "tags",
  "public",
  "webhook_token",
  "old_name",
  "expose_build_created_by",
] as const
const resourceTypeKeys = [
  "name",
  "type",
  "source",
  "privileged",
  "params",
  "check_every",
  "tags",
  "defaults",
  "unique_version_history",
] as const
const hookKeys = [
  ["on_success", "onSuccess"],
  ["on_failure", "onFailure"],
  ["on_error", "onError"],
  ["on_abort", "onAbort"],
  ["ensure", "ensure"],
] as const
const stepKinds = ["task", "get", "put", "load_var", "set_pipeline", "gate", "do", "try", "in_parallel"] as const
const modifierKeys = ["timeout", "attempts", "tags", "across", ...hookKeys.map(([key]) => key)] as const
const stepKeys: Record<StepKind, readonly string[]> = {
  task: [
    "task",
    "config",
    "file",
    "image",
    "privileged",
    "params",
    "vars",
    "input_mapping",
    "output_mapping",
    "container_limits",
    "hermetic",
  ],
  get: ["get", "resource", "passed", "trigger", "params", "version"],
  put: ["put", "resource", "params", "inputs", "get_params", "no_get"],
  load_var: ["load_var", "file", "format", "reveal"],
  set_pipeline: ["set_pipeline", "file", "vars", "var_files"],
  gate: ["gate", "message", "approvers"],
  do: ["do"],
  try: ["try"],
  in_parallel: ["in_parallel"],
}
/** Keys Concourse has and runnel refuses, with the reason, rather than a "did you mean". */
const unsupportedStepKeys: Readonly<Record<string, string>> = {
  team: "set_pipeline into another team is not supported: runnel has no teams",
  instance_vars: "instanced pipelines (instance_vars) are not supported by runnel; set a pipeline per name instead",
  aggregate: "aggregate was removed in Concourse 7; use in_parallel",
}
/** Pipeline names are Kubernetes resource names (contract.md section 4). */
const pipelineNamePattern = /^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$/
const identifierPattern = /^[A-Za-z_][A-Za-z0-9_-]*$/

/** Reads the pipeline into typed structures and collects the names it declares and references. */
class PipelineReader {
  readonly index: PipelineIndex = emptyIndex()
  readonly #c: Checker
  /** The job whose plan is being read: get and put steps are recorded as its uses. */
  #job = ""

  constructor(checker: Checker) {
    this.#c = checker
  }

  pipeline(root: Node): YamlPipeline | undefined {
    const c = this.#c
    if (root.value === null) {
      return c.problem(root, "the pipeline is empty; it needs jobs:, for example jobs: [{name: build, plan: [...]}]")
    }
    if (!isMapping(root.value)) return c.problem(root, `the pipeline must be a mapping, not ${describe(root.value)}`)
    // atc/config.go (UnmarshalConfig) keeps only the keys it knows at the top
    // level before its strict parse, so pipelines park YAML anchors under keys
    // like `shared:`. Ignored here too, with a note; inside jobs and steps an
    // unknown key is still refused, as Concourse refuses it.
    const notes: string[] = []
    for (const key of Object.keys(root.value)) {
      if ((pipelineKeys as readonly string[]).includes(key)) continue
      const close = suggestion(key, pipelineKeys)
      notes.push(`line ${c.lineOf(root, key)}: top-level key "${key}" ignored, as Concourse ignores it${close}`)
    }
    const jobsNode = c.child(root, "jobs")
    if (jobsNode === undefined) c.problem(root, "the pipeline has no jobs; add jobs: with at least one job")
    else if (Array.isArray(jobsNode.value) && jobsNode.value.length === 0) {
      c.problem(jobsNode, "the pipeline has no jobs; add at least one")
    }
    const maxInFlightNode = c.child(root, "max_in_flight")
    const maxInFlight = maxInFlightNode === undefined ? undefined : c.positiveInteger(maxInFlightNode)
    const displayNode = c.child(root, "display")
    const display = displayNode === undefined ? undefined : this.#display(displayNode)
    return {
      jobs: this.#named(jobsNode, "job", this.index.jobs, (node, name) => this.#jobOf(node, name)),
      resources: this.#named(c.child(root, "resources"), "resource", this.index.resources, (node, name) =>
        this.#resource(node, name),
      ),
      resourceTypes: this.#named(
        c.child(root, "resource_types"),
        "resource type",
        this.index.resourceTypes,
        (n, name) => this.#resourceType(n, name),
      ),
      groups: this.#named(c.child(root, "groups"), "group", this.index.groups, (node, name) => this.#group(node, name)),
      varSources: this.#named(c.child(root, "var_sources"), "var source", this.index.varSources, (node, name) =>
        this.#varSource(node, name),
      ),
      ...(maxInFlight === undefined ? {} : { maxInFlight }),
      ...(display === undefined ? {} : { display }),
      notes,
    }
  }

  /** A list of mappings that each have a `name`: jobs, resources, groups. */
  #named<T>(
    node: Node | undefined,
    what: string,
    refs: NameRef[],
    read: (item: Node, name: string) => T | undefined,
  ): T[] {
    if (node === undefined) return []
    const c = this.#c
    const out: T[] = []
    for (const item of c.list(node) ?? []) {
      if (!isMapping(item.value)) {
        c.problem(item, `each ${what} must be a mapping with a name, not ${describe(item.value)}`)
        continue
      }
      const nameNode = c.child(item, "name")
      const name = nameNode === undefined ? c.problem(item, `this ${what} has no name`) : this.#name(nameNode, what)
      if (name !== undefined && nameNode !== undefined) refs.push({ name, path: nameNode.path, line: nameNode.line })
      const value = read(item, name ?? "")
      if (value !== undefined && name !== undefined) out.push(value)
    }
    return out
  }

  /**
   * A name of a job, resource or step. It becomes part of task paths
   * (`jobs/<job>/<n>/<step_kind>/<name>`), so it may not hold a slash.
   */
  #name(node: Node, what: string): string | undefined {
    const name = this.#c.string(node)
    if (name === undefined) return undefined
    if (name.trim() === "") return this.#c.problem(node, `the ${what} name must not be empty`)
    if (name.includes("/")) {
      return this.#c.problem(node, `the ${what} name "${name}" must not contain "/": names become part of task paths`)
    }
    // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is refused
    if (/[\u0000-\u001f\u007f]/.test(name))
      return this.#c.problem(node, `the ${what} name must not hold control characters`)
    return name
  }

  #jobOf(node: Node, name: string): Job | undefined {
    const c = this.#c
    c.mapping(node, `job "${name}"`, jobKeys)
    this.#job = name
    const planNode = c.child(node, "plan")
    let plan: Step[] = []
    if (planNode === undefined) {
      c.problem(node, `job "${name}" has no plan; add plan: with its steps`)
    } else {
      const items = c.list(planNode)
      if (items?.length === 0) c.problem(planNode, `job "${name}" has no steps; add at least one`)
      plan = (items ?? []).flatMap((item) => this.#step(item, 1) ?? [])
    }
    const hooks = this.#hooks(node, 1)
    const maxInFlightNode = c.child(node, "max_in_flight")
    const maxInFlight = maxInFlightNode === undefined ? undefined : c.positiveInteger(maxInFlightNode)
    const webhookNode = c.child(node, "webhook_trigger")
    const webhookTrigger = webhookNode === undefined ? undefined : c.string(webhookNode)
    if (webhookTrigger?.trim() === "" && webhookNode !== undefined) {
      c.problem(webhookNode, "must be a boolean expression, for example eventType == 'push'")
    }
    const triggersNode = c.child(node, "triggers")
    const triggers = triggersNode === undefined ? undefined : this.#triggers(triggersNode)
    const oldName = c.child(node, "old_name")
    const oldNameText = oldName === undefined ? undefined : c.string(oldName)
    const retention = this.#retention(node)
    this.#job = ""
    return {
      at: { path: node.path, line: node.line },
      name,
      plan,
      serial: c.boolean(c.child(node, "serial")),
      serialGroups: c.stringList(c.child(node, "serial_groups")),
      ...(maxInFlight === undefined ? {} : { maxInFlight }),
      ...(webhookTrigger === undefined ? {} : { webhookTrigger }),
      ...(triggers === undefined ? {} : { triggers }),
      public: c.boolean(c.child(node, "public")),
      disableManualTrigger: c.boolean(c.child(node, "disable_manual_trigger")),
      interruptible: c.boolean(c.child(node, "interruptible")),
      ...(oldNameText === undefined ? {} : { oldName: oldNameText }),
      ...(retention === undefined ? {} : { buildLogRetention: retention }),
      ...hooks,
    }
  }

  #retention(node: Node): Job["buildLogRetention"] {
    const c = this.#c
    const legacy = c.child(node, "build_logs_to_retain")
    const retention = c.child(node, "build_log_retention")
    if (retention === undefined) {
      const builds = legacy === undefined ? undefined : c.nonNegativeInteger(legacy)
      return builds === undefined ? undefined : { builds }
    }
    if (c.mapping(retention, "build_log_retention", ["builds", "days", "minimum_succeeded_builds"]) === undefined) {
      return undefined
    }
    const count = (key: string) => {
      const child = c.child(retention, key)
      return child === undefined ? undefined : c.nonNegativeInteger(child)
    }
    const builds = count("builds")
    const days = count("days")
    const minimumSucceededBuilds = count("minimum_succeeded_builds")
    return {
      ...(builds === undefined ? {} : { builds }),
      ...(days === undefined ? {} : { days }),
      ...(minimumSucceededBuilds === undefined ? {} : { minimumSucceededBuilds }),
    }
  }

  /**
   * `triggers: {schedule: {cron: "0 * * * *", timezone: Europe/Paris}}` or `{every: 5m}`: stored as a
   * Schedule when the pipeline is, so each is checked here as the scheduler will read it.
   */
  #triggers(node: Node): Job["triggers"] {
    const c = this.#c
    if (c.mapping(node, "triggers", ["schedule"]) === undefined) return undefined
    const scheduleNode = c.child(node, "schedule")
    if (scheduleNode === undefined) return {}
    if (c.mapping(scheduleNode, "schedule", ["cron", "every", "timezone"]) === undefined) return {}
    const cronNode = c.child(scheduleNode, "cron")
    const everyNode = c.child(scheduleNode, "every")
    const zoneNode = c.child(scheduleNode, "timezone")
    if (cronNode !== undefined && everyNode !== undefined) {
      c.problem(scheduleNode, "a schedule has either cron or every, not both")
      return {}
    }
    let schedule: Schedule | undefined
    if (cronNode !== undefined) {
      const timeZone = zoneNode === undefined ? undefined : c.string(zoneNode)
      const cron = this.#cron(cronNode, timeZone)
      if (cron !== undefined) schedule = timeZone === undefined ? { cron } : { cron, timeZone }
    } else if (everyNode !== undefined) {
      if (zoneNode !== undefined)
        c.problem(zoneNode, "timezone applies to cron schedules only; every counts from the schedule's creation")
      // Schedules are created when the pipeline is stored, so the interval must be written out.
      const every = c.duration(everyNode, { allowVariable: false, minimumMs: minimumIntervalMs })
      if (every !== undefined) schedule = { every }
    } else {
      c.problem(scheduleNode, 'a schedule needs cron (for example cron: "0 * * * *") or every (for example every: 1h)')
    }
    return schedule === undefined ? {} : { schedule }
  }

  /** A cron expression as the scheduler reads it (cron-parser): its message when it cannot. */
  #cron(node: Node, timeZone: string | undefined): string | undefined {
    const text = this.#c.string(node)
    if (text === undefined) return undefined
    if (hasVariable(text)) return this.#c.problem(node, "must be written out: a variable is not allowed here")
    try {
      scheduleTimes("cron", text, { timeZone })
    } catch (error) {
      return this.#c.problem(node, errorMessage(error))
    }
    return text.trim()
  }

  #hooks(node: Node, depth: number): Hooks {
    const hooks: { -readonly [K in keyof Hooks]: Step } = {}
    for (const [key, field] of hookKeys) {
      const child = this.#c.child(node, key)
      const step = child === undefined ? undefined : this.#step(child, depth + 1)
      if (step !== undefined) hooks[field] = step
    }
    return hooks
  }

  #step(node: Node, depth: number): Step | undefined {
    const c = this.#c
    if (!isMapping(node.value)) {
      return c.problem(
        node,
        `a step must be a mapping such as "task: build" or "get: repo", not ${describe(node.value)}`,
      )
    }
    const keys = Object.keys(node.value)
    const kinds = stepKinds.filter((kind) => keys.includes(kind))
    const [kind, second] = kinds
    if (kind === undefined) {
      if (keys.includes("aggregate")) {
        return c.problem(
          { path: childPath(node.path, "aggregate"), line: c.lineOf(node, "aggregate") },
          unsupportedStepKeys.aggregate ?? "",
        )
      }
      for (const key of keys) {
        const close = (modifierKeys as readonly string[]).includes(key) ? undefined : didYouMean(key, stepKinds)
        if (close !== undefined) {
          return c.problem(
            { path: childPath(node.path, key), line: c.lineOf(node, key) },
            `unknown key "${key}" in a step; did you mean "${close}"?`,
          )
        }
      }
      return c.problem(node, `a step needs one of ${stepKinds.join(", ")}`)
    }
    if (second !== undefined) {
      return c.problem(node, `a step has both ${kind} and ${second}; write them as two steps`)
    }
    if (depth > maxStepDepth) {
      return c.problem(node, `steps nest more than ${maxStepDepth} levels deep; flatten the plan`)
    }
    c.mapping(node, `a ${kind} step`, [...stepKeys[kind], ...modifierKeys], unsupportedStepKeys)
    const common = this.#common(node, depth)
    const kindNode = c.child(node, kind)
    switch (kind) {
      case "task":
        return this.#task(node, kindNode, common)
      case "get":
      case "put":
        return this.#resourceStep(node, kind, kindNode, common)
      case "load_var":
        return this.#loadVar(node, kindNode, common)
      case "set_pipeline":
        return this.#setPipeline(node, kindNode, common)
      case "gate":
        return this.#gate(node, kindNode, common)
      case "do": {
        if (kindNode === undefined) return c.problem(node, "do needs a list of steps")
        const steps = (c.list(kindNode) ?? []).flatMap((item) => this.#step(item, depth + 1) ?? [])
        return { kind, steps, ...common }
      }
      case "try": {
        if (kindNode === undefined) return c.problem(node, "try needs a step")
        const step = this.#step(kindNode, depth + 1)
        return step === undefined ? undefined : { kind, step, ...common }
      }
      case "in_parallel":
        return this.#inParallel(node, kindNode, depth, common)
    }
  }

  #stepName(node: Node, kindNode: Node | undefined, kind: StepKind): string | undefined {
    if (kindNode === undefined) return this.#c.problem(node, `the ${kind} step needs a name: ${kind}: NAME`)
    return this.#name(kindNode, kind)
  }

  #common(node: Node, depth: number): StepCommon {
    const c = this.#c
    const timeoutNode = c.child(node, "timeout")
    const timeout = timeoutNode === undefined ? undefined : c.duration(timeoutNode)
    const attemptsNode = c.child(node, "attempts")
    const attempts = attemptsNode === undefined ? undefined : c.positiveInteger(attemptsNode)
    const acrossNode = c.child(node, "across")
    const across = acrossNode === undefined ? undefined : this.#across(acrossNode)
    return {
      at: { path: node.path, line: node.line },
      ...(timeout === undefined ? {} : { timeout }),
      ...(attempts === undefined ? {} : { attempts }),
      tags: c.stringList(c.child(node, "tags")),
      ...(across === undefined ? {} : { across }),
      ...this.#hooks(node, depth),
    }
  }

  #across(node: Node): AcrossVar[] | undefined {
    const c = this.#c
    const items = c.list(node)
    if (items === undefined) return undefined
    if (items.length === 0)
      return c.problem(node, "across needs at least one var, for example across: [{var: os, values: [linux, darwin]}]")
    const seen = new Set<string>()
    return items.flatMap((item): AcrossVar[] => {
      if (c.mapping(item, "an across var", ["var", "values", "max_in_flight", "fail_fast"]) === undefined) return []
      const varNode = c.child(item, "var")
      const valuesNode = c.child(item, "values")
      if (varNode === undefined)
        c.problem(item, "an across entry needs var: the name its values take, used as ((.:name))")
      if (valuesNode === undefined)
        c.problem(item, "an across entry needs values: a list, or a ((variable)) holding one")
      const name = varNode === undefined ? undefined : c.string(varNode)
      if (varNode !== undefined && name !== undefined) {
        if (!identifierPattern.test(name)) {
          c.problem(varNode, `"${name}" is not a valid var name; use letters, digits, "_" and "-"`)
        } else if (seen.has(name)) {
          c.problem(varNode, `the var "${name}" appears twice in across`)
        }
        seen.add(name)
      }
      let values: AcrossVar["values"] | undefined
      if (valuesNode !== undefined) {
        const value = valuesNode.value
        if (Array.isArray(value)) values = value
        else if (typeof value === "string" && hasVariable(value)) values = value
        else c.problem(valuesNode, `must be a list of values or a ((variable)) holding one, not ${describe(value)}`)
      }
      const maxNode = c.child(item, "max_in_flight")
      const maxInFlight =
        maxNode === undefined ? undefined : maxNode.value === "all" ? ("all" as const) : c.positiveInteger(maxNode)
      const failFast = c.boolean(c.child(item, "fail_fast"))
      if (name === undefined || values === undefined) return []
      return [{ var: name, values, ...(maxInFlight === undefined ? {} : { maxInFlight }), failFast }]
    })
  }

  #task(node: Node, kindNode: Node | undefined, common: StepCommon): Step | undefined {
    const c = this.#c
    const name = this.#stepName(node, kindNode, "task")
    const configNode = c.child(node, "config")
    const fileNode = c.child(node, "file")
    const config = configNode === undefined ? undefined : readTaskConfig(c, configNode)
    const imageType = configNode === undefined ? undefined : c.child(configNode, "image_resource")
    const imageTypeNode = imageType === undefined ? undefined : c.child(imageType, "type")
    const typeName = config?.imageResource?.type
    if (imageTypeNode !== undefined && typeName !== undefined && !hasVariable(typeName)) {
      this.index.imageTypes.push({ name: typeName, path: imageTypeNode.path, line: imageTypeNode.line })
    }
    const file = fileNode === undefined ? undefined : c.string(fileNode)
    const at = kindNode ?? node
    if (configNode === undefined && fileNode === undefined) {
      c.problem(
        at,
        `task "${name ?? ""}" has neither config nor file; give it config: (platform, image_resource, run) or file: an-artifact/task.yml`,
      )
    } else if (configNode !== undefined && fileNode !== undefined) {
      c.problem(at, `task "${name ?? ""}" has both config and file; keep one`)
    }
    const imageNode = c.child(node, "image")
    const image = imageNode === undefined ? undefined : c.string(imageNode)
    const limitsNode = c.child(node, "container_limits")
    const containerLimits = limitsNode === undefined ? undefined : readContainerLimits(c, limitsNode)
    if (name === undefined) return undefined
    return {
      kind: "task",
      name,
      ...(config === undefined ? {} : { config }),
      ...(file === undefined ? {} : { file }),
      ...(image === undefined ? {} : { image }),
      privileged: c.boolean(c.child(node, "privileged")),
      params: c.freeMapping(c.child(node, "params")),
      vars: c.freeMapping(c.child(node, "vars")),
      inputMapping: c.stringMapping(c.child(node, "input_mapping")),
      outputMapping: c.stringMapping(c.child(node, "output_mapping")),
      ...(containerLimits === undefined ? {} : { containerLimits }),
      hermetic: c.boolean(c.child(node, "hermetic")),
      ...common,
    }
  }

  #resourceStep(node: Node, kind: "get" | "put", kindNode: Node | undefined, common: StepCommon): Step | undefined {
    const c = this.#c
    const name = this.#stepName(node, kindNode, kind)
    const resourceNode = c.child(node, "resource")
    const resource = resourceNode === undefined ? name : this.#name(resourceNode, "resource")
    const passed: NameRef[] = []
    const passedNode = kind === "get" ? c.child(node, "passed") : undefined
    for (const item of passedNode === undefined ? [] : (c.list(passedNode) ?? [])) {
      const job = c.string(item)
      if (job !== undefined) passed.push({ name: job, path: item.path, line: item.line })
    }
    const refNode = resourceNode ?? kindNode
    if (resource !== undefined && refNode !== undefined) {
      this.index.uses.push({ name: resource, path: refNode.path, line: refNode.line, job: this.#job, passed })
    }
    const params = c.freeMapping(c.child(node, "params"))
    if (kind === "get") {
      const versionNode = c.child(node, "version")
      const version = versionNode === undefined ? undefined : this.#version(versionNode)
      if (name === undefined || resource === undefined) return undefined
      return {
        kind,
        name,
        resource,
        passed: passed.map((ref) => ref.name),
        trigger: c.boolean(c.child(node, "trigger")),
        params,
        ...(version === undefined ? {} : { version }),
        ...common,
      }
    }
    const inputsNode = c.child(node, "inputs")
    let inputs: "all" | "detect" | string[] | undefined
    if (inputsNode !== undefined) {
      if (typeof inputsNode.value === "string") inputs = c.choice(inputsNode, ["all", "detect"] as const)
      else if (Array.isArray(inputsNode.value)) inputs = c.stringList(inputsNode)
      else c.problem(inputsNode, `must be all, detect or a list of artifact names, not ${describe(inputsNode.value)}`)
    }
    const getParams = c.freeMapping(c.child(node, "get_params"))
    const noGet = c.boolean(c.child(node, "no_get"))
    if (name === undefined || resource === undefined) return undefined
    return { kind, name, resource, params, ...(inputs === undefined ? {} : { inputs }), getParams, noGet, ...common }
  }

  #version(node: Node): "latest" | "every" | Record<string, string> | undefined {
    if (typeof node.value === "string") return this.#c.choice(node, ["latest", "every"] as const)
    if (isMapping(node.value)) return this.#c.stringMapping(node)
    return this.#c.problem(
      node,
      `must be latest, every or a version such as {ref: abc123}, not ${describe(node.value)}`,
    )
  }

  #loadVar(node: Node, kindNode: Node | undefined, common: StepCommon): Step | undefined {
    const c = this.#c
    const name = this.#stepName(node, kindNode, "load_var")
    const file = this.#file(node, "load_var")
    const formatNode = c.child(node, "format")
    const format =
      formatNode === undefined ? undefined : c.choice(formatNode, ["json", "yaml", "yml", "trim", "raw"] as const)
    const reveal = c.boolean(c.child(node, "reveal"))
    if (name === undefined || file === undefined) return undefined
    return { kind: "load_var", name, file, ...(format === undefined ? {} : { format }), reveal, ...common }
  }

  /** `gate: NAME` with `message` and `approvers`; its `timeout` is the common modifier, counted from the gate's creation. */
  #gate(node: Node, kindNode: Node | undefined, common: StepCommon): Step | undefined {
    const c = this.#c
    const name = this.#stepName(node, kindNode, "gate")
    const messageNode = c.child(node, "message")
    const message = messageNode === undefined ? undefined : c.string(messageNode)
    const approversNode = c.child(node, "approvers")
    const approvers = approversNode === undefined ? undefined : c.string(approversNode)
    if (name === undefined) return undefined
    return {
      kind: "gate",
      name,
      ...(message === undefined ? {} : { message }),
      ...(approvers === undefined ? {} : { approvers }),
      ...common,
    }
  }

  #setPipeline(node: Node, kindNode: Node | undefined, common: StepCommon): Step | undefined {
    const c = this.#c
    const name = this.#stepName(node, kindNode, "set_pipeline")
    if (name !== undefined && kindNode !== undefined && name !== "self" && !hasVariable(name)) {
      if (!pipelineNamePattern.test(name)) {
        c.problem(
          kindNode,
          `"${name}" is not a pipeline name; use self, or lowercase letters, digits, "-" and ".", starting and ending with a letter or digit, at most 63 characters`,
        )
      }
    }
    const file = this.#file(node, "set_pipeline")
    const vars = c.freeMapping(c.child(node, "vars"))
    const varFiles = c.stringList(c.child(node, "var_files"))
    if (name === undefined || file === undefined) return undefined
    return { kind: "set_pipeline", name, file, vars, varFiles, ...common }
  }

  #file(node: Node, kind: string): string | undefined {
    const fileNode = this.#c.child(node, "file")
    if (fileNode === undefined) {
      return this.#c.problem(
        node,
        `the ${kind} step needs file: the path of the file in an artifact, for example repo/ci/file.yml`,
      )
    }
    return this.#c.string(fileNode)
  }

  #inParallel(node: Node, kindNode: Node | undefined, depth: number, common: StepCommon): Step | undefined {
    const c = this.#c
    if (kindNode === undefined) return c.problem(node, "in_parallel needs a list of steps")
    let stepsNode: Node | undefined = kindNode
    let limit: number | undefined
    let failFast = false
    if (isMapping(kindNode.value)) {
      c.mapping(kindNode, "in_parallel", ["steps", "limit", "fail_fast"])
      stepsNode = c.child(kindNode, "steps")
      if (stepsNode === undefined) c.problem(kindNode, "in_parallel needs steps: a list of steps")
      const limitNode = c.child(kindNode, "limit")
      limit = limitNode === undefined ? undefined : c.positiveInteger(limitNode)
      failFast = c.boolean(c.child(kindNode, "fail_fast"))
    } else if (!Array.isArray(kindNode.value)) {
      return c.problem(
        kindNode,
        `in_parallel must be a list of steps, or a mapping with steps, limit and fail_fast, not ${describe(kindNode.value)}`,
      )
    }
    const items = stepsNode === undefined ? [] : (c.list(stepsNode) ?? [])
    const steps = items.flatMap((item) => this.#step(item, depth + 1) ?? [])
    return { kind: "in_parallel", steps, ...(limit === undefined ? {} : { limit }), failFast, ...common }
  }

  #resource(node: Node, name: string): Resource | undefined {
    const c = this.#c
    c.mapping(node, `resource "${name}"`, resourceKeys)
    const type = this.#requiredString(node, "type", `resource "${name}" needs a type, for example type: git`)
    const text = (key: string) => {
      const child = c.child(node, key)
      return child === undefined ? undefined : c.string(child)
    }
    const checkEveryNode = c.child(node, "check_every")
    const checkEvery =
      checkEveryNode === undefined ? undefined : checkEveryNode.value === "never" ? "never" : c.duration(checkEveryNode)
    const checkTimeoutNode = c.child(node, "check_timeout")
    const checkTimeout = checkTimeoutNode === undefined ? undefined : c.duration(checkTimeoutNode)
    const versionNode = c.child(node, "version")
    const version = versionNode === undefined ? undefined : c.stringMapping(versionNode)
    const icon = text("icon")
    const webhookToken = text("webhook_token")
    const oldName = text("old_name")
    if (type === undefined) return undefined
    return {
      at: { path: node.path, line: node.line },
      name,
      type,
      source: c.freeMapping(c.child(node, "source")),
      ...(icon === undefined ? {} : { icon }),
      ...(version === undefined ? {} : { version }),
      ...(checkEvery === undefined ? {} : { checkEvery }),
      ...(checkTimeout === undefined ? {} : { checkTimeout }),
      tags: c.stringList(c.child(node, "tags")),
      public: c.boolean(c.child(node, "public")),
      ...(webhookToken === undefined ? {} : { webhookToken }),
      ...(oldName === undefined ? {} : { oldName }),
      exposeBuildCreatedBy: c.boolean(c.child(node, "expose_build_created_by")),
    }
  }

  #resourceType(node: Node, name: string): ResourceType | undefined {
    const c = this.#c
    c.mapping(node, `resource type "${name}"`, resourceTypeKeys)
    const type = this.#requiredString(
      node,
      "type",
      `resource type "${name}" needs a type, for example type: registry-image`,
    )
    const checkEveryNode = c.child(node, "check_every")
    const checkEvery =
      checkEveryNode === undefined ? undefined : checkEveryNode.value === "never" ? "never" : c.duration(checkEveryNode)
    if (type === undefined) return undefined
    return {
      at: { path: node.path, line: node.line },
      name,
      type,
      source: c.freeMapping(c.child(node, "source")),
      privileged: c.boolean(c.child(node, "privileged")),
      params: c.freeMapping(c.child(node, "params")),
      ...(checkEvery === undefined ? {} : { checkEvery }),
      tags: c.stringList(c.child(node, "tags")),
      defaults: c.freeMapping(c.child(node, "defaults")),
      uniqueVersionHistory: c.boolean(c.child(node, "unique_version_history")),
    }
  }

  #group(node: Node, name: string): Group {
    const c = this.#c
    c.mapping(node, `group "${name}"`, ["name", "jobs", "resources"])
    const jobsNode = c.child(node, "jobs")
    const jobs: string[] = []
    for (const item of jobsNode === undefined ? [] : (c.list(jobsNode) ?? [])) {
      const job = c.string(item)
      if (job === undefined) continue
      jobs.push(job)
      this.index.groupJobs.push({ name: job, path: item.path, line: item.line })
    }
    return { name, jobs, resources: c.stringList(c.child(node, "resources")) }
  }

  #varSource(node: Node, name: string): VarSource | undefined {
    const c = this.#c
    c.mapping(node, `var source "${name}"`, ["name", "type", "config"])
    const typeNode = c.child(node, "type")
    if (typeNode === undefined) c.problem(node, `var source "${name}" needs a type; runnel supports type: dummy`)
    else if (typeNode.value !== "dummy") {
      c.problem(
        typeNode,
        `var sources of type ${typeof typeNode.value === "string" ? `"${typeNode.value}"` : describe(typeNode.value)} are not supported; runnel supports type: dummy`,
      )
    }
    const configNode = c.child(node, "config")
    let vars: YamlMap = {}
    if (configNode !== undefined && c.mapping(configNode, "a dummy var source's config", ["vars"]) !== undefined) {
      vars = c.freeMapping(c.child(configNode, "vars"))
    }
    return typeNode?.value === "dummy" ? { name, type: "dummy", vars } : undefined
  }

  #display(node: Node): YamlMap | undefined {
    const map = this.#c.mapping(node, "display", ["background_image", "background_filter"])
    for (const key of ["background_image", "background_filter"]) {
      const child = this.#c.child(node, key)
      if (child !== undefined) this.#c.string(child)
    }
    return map
  }

  #requiredString(node: Node, key: string, missing: string): string | undefined {
    const child = this.#c.child(node, key)
    if (child === undefined) return this.#c.problem(node, missing)
    const text = this.#c.string(child)
    if (text === "") return this.#c.problem(child, "must not be empty")
    return text
  }
}
