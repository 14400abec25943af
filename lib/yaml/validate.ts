import { suggestion } from "./did-you-mean.ts"
import type { ProblemList } from "./yaml-pipeline-error.ts"

/** A name as written somewhere in the pipeline: a declaration or a reference. */
export type NameRef = { readonly name: string; readonly path: string; readonly line: number }

/** A get or put step naming a resource, in `job`, with the jobs its `passed:` names. */
export type ResourceUse = NameRef & { readonly job: string; readonly passed: readonly NameRef[] }

/** What the reader collects while it reads a pipeline, for the checks across it. */
export type PipelineIndex = {
  readonly jobs: NameRef[]
  readonly resources: NameRef[]
  readonly resourceTypes: NameRef[]
  readonly groups: NameRef[]
  readonly varSources: NameRef[]
  readonly uses: ResourceUse[]
  readonly groupJobs: NameRef[]
  /** The types of inline task configs' image_resource. */
  readonly imageTypes: NameRef[]
}

export function emptyIndex(): PipelineIndex {
  return {
    jobs: [],
    resources: [],
    resourceTypes: [],
    groups: [],
    varSources: [],
    uses: [],
    groupJobs: [],
    imageTypes: [],
  }
}

/** The image_resource types runnel knows without resource_types. */
const imageTypes = ["registry-image", "docker-image", "mock"]

/**
 * The checks `fly set-pipeline` makes across a pipeline: names declared once,
 * every get and put naming a declared resource, every `passed:` naming a job
 * that touches that resource without forming a cycle, every resource used,
 * and every image_resource type known.
 * `complete` is false when some steps could not be read: a resource may then
 * look unused when it is not, so that check waits for a clean read.
 */
export function validateReferences(index: PipelineIndex, problems: ProblemList, complete: boolean): void {
  const jobs = declared(index.jobs, "job", problems)
  const resources = declared(index.resources, "resource", problems)
  const resourceTypes = declared(index.resourceTypes, "resource type", problems)
  declared(index.groups, "group", problems)
  declared(index.varSources, "var source", problems)

  const touched = new Map<string, Set<string>>()
  for (const use of index.uses) {
    if (!resources.has(use.name)) {
      problems.add(
        use.path,
        use.line,
        `resource "${use.name}" is not declared in resources${suggestion(use.name, resources.keys())}`,
      )
    }
    const names = touched.get(use.job) ?? new Set<string>()
    names.add(use.name)
    touched.set(use.job, names)
  }

  for (const use of index.uses) {
    for (const passed of use.passed) {
      if (!jobs.has(passed.name)) {
        problems.add(
          passed.path,
          passed.line,
          `job "${passed.name}" is not defined${suggestion(passed.name, jobs.keys())}`,
        )
      } else if (passed.name !== use.job && !touched.get(passed.name)?.has(use.name)) {
        problems.add(
          passed.path,
          passed.line,
          `job "${passed.name}" neither gets nor puts resource "${use.name}", so no version of it can pass that job`,
        )
      }
    }
  }

  reportCycles(index.uses, problems)

  if (complete) {
    for (const resource of index.resources) {
      if (![...touched.values()].some((names) => names.has(resource.name))) {
        problems.add(
          resource.path,
          resource.line,
          `resource "${resource.name}" is not used by any job; use it in a get or put step, or remove it`,
        )
      }
    }
  }

  for (const ref of index.imageTypes) {
    if (!imageTypes.includes(ref.name) && !resourceTypes.has(ref.name)) {
      problems.add(
        ref.path,
        ref.line,
        `image_resource type "${ref.name}" is neither ${imageTypes.join(", ")} nor declared in resource_types${suggestion(ref.name, [...imageTypes, ...resourceTypes.keys()])}`,
      )
    }
  }

  for (const ref of index.groupJobs) {
    // Concourse lets a group name jobs with glob patterns; only plain names are checked.
    if (!/[*?[]/.test(ref.name) && !jobs.has(ref.name)) {
      problems.add(ref.path, ref.line, `job "${ref.name}" is not defined${suggestion(ref.name, jobs.keys())}`)
    }
  }
}

/** The first declaration of each name; a second one is a problem. */
function declared(refs: readonly NameRef[], what: string, problems: ProblemList): Map<string, NameRef> {
  const first = new Map<string, NameRef>()
  for (const ref of refs) {
    const earlier = first.get(ref.name)
    if (earlier === undefined) {
      first.set(ref.name, ref)
      continue
    }
    problems.add(
      ref.path,
      ref.line,
      `${what} "${ref.name}" is defined twice; the first is ${earlier.path}, on line ${earlier.line}`,
    )
  }
  return first
}

/**
 * `passed:` draws edges from a job to the jobs before it; the edges must not
 * come back around. Each cycle is reported once, at the `passed:` entry that
 * closes it, with the jobs on it.
 */
function reportCycles(uses: readonly ResourceUse[], problems: ProblemList): void {
  const upstream = new Map<string, NameRef[]>()
  for (const use of uses) {
    const refs = upstream.get(use.job) ?? []
    refs.push(...use.passed)
    upstream.set(use.job, refs)
  }
  const done = new Set<string>()
  const onPath: string[] = []
  // Iterative depth-first search: a long chain of jobs must not exhaust the stack.
  for (const start of upstream.keys()) {
    if (done.has(start)) continue
    const stack: { job: string; next: number }[] = [{ job: start, next: 0 }]
    onPath.push(start)
    while (stack.length > 0) {
      const frame = stack[stack.length - 1]
      if (frame === undefined) break
      const refs = upstream.get(frame.job) ?? []
      const ref = refs[frame.next++]
      if (ref === undefined) {
        done.add(frame.job)
        stack.pop()
        onPath.pop()
        continue
      }
      if (done.has(ref.name) || (!upstream.has(ref.name) && ref.name !== frame.job)) continue
      const loopAt = onPath.indexOf(ref.name)
      if (loopAt >= 0) {
        const cycle = [...onPath.slice(loopAt), ref.name].reverse().join(" → ")
        problems.add(
          ref.path,
          ref.line,
          `passed: forms a cycle (${cycle}); a job can take versions only from jobs before it`,
        )
        continue
      }
      stack.push({ job: ref.name, next: 0 })
      onPath.push(ref.name)
    }
  }
}
