import { errorMessage } from "../lib/core/errors.ts"
import type { Log } from "../lib/core/log.ts"
import type { Informer } from "../lib/kube/informer.ts"
import type { ResourceClient } from "../lib/kube/resource-client.ts"
import { kubeTime, type PipelineObject, type PipelineSpec, withCondition } from "../lib/kube/resources.ts"
import { contentTypeOf } from "../lib/script/content-type.ts"
import { checkPipelineContent } from "./pipeline-check.ts"
import { declaredSchedules, syncSchedules } from "./schedules.ts"

/** How many past generations of each pipeline are kept in memory for queued Runs that name them. */
const keptGenerations = 8

/**
 * The specs of the pipeline generations this operator has seen, so that a
 * Run that names generation 3 runs generation 3 even when the Pipeline moved
 * on to 4 while the Run was queued. Only memory: after a restart only the
 * current generation is known.
 */
export class PipelineGenerations {
  readonly #byUid = new Map<string, Map<number, PipelineSpec>>()

  remember(pipeline: PipelineObject): void {
    const uid = pipeline.metadata?.uid
    const generation = pipeline.metadata?.generation
    if (uid === undefined || generation === undefined) return
    let generations = this.#byUid.get(uid)
    if (generations === undefined) {
      generations = new Map()
      this.#byUid.set(uid, generations)
    }
    generations.set(generation, pipeline.spec)
    for (const old of generations.keys()) {
      if (generations.size <= keptGenerations) break
      generations.delete(old)
    }
  }

  get(uid: string, generation: number): PipelineSpec | undefined {
    return this.#byUid.get(uid)?.get(generation)
  }

  forget(uid: string | undefined): void {
    if (uid !== undefined) this.#byUid.delete(uid)
  }
}

/** The calls the Pipeline reconciler makes: its status, and the Schedules its content declares. */
export type PipelineReconcilerClient = Pick<ResourceClient, "patchPipelineStatus"> & Parameters<typeof syncSchedules>[0]

/**
 * Keeps each Pipeline's `Ready` condition and `observedGeneration` true to
 * its current spec: the content compiles and exports a pipeline, or the YAML
 * validates (True), or the compiler's or validator's message with its line
 * (False, reason InvalidContent); and its Schedules those its YAML declares.
 * Level-triggered: a Pipeline whose status already describes its generation
 * is left alone, so replays of the same events write nothing.
 */
export class PipelineReconciler {
  readonly #client: PipelineReconcilerClient
  readonly #log: Log
  readonly #pending = new Set<string>()
  #informer: Informer<PipelineObject> | undefined
  #working: Promise<void> | undefined

  constructor(options: { client: PipelineReconcilerClient; log: Log }) {
    this.#client = options.client
    this.#log = options.log
  }

  attach(informer: Informer<PipelineObject>): void {
    this.#informer = informer
    for (const pipeline of informer.list()) this.changed(pipeline)
  }

  changed(pipeline: PipelineObject): void {
    const name = pipeline.metadata?.name
    if (name === undefined) return
    this.#pending.add(name)
    this.#kick()
  }

  #kick(): void {
    this.#working ??= this.#work().finally(() => {
      this.#working = undefined
      if (this.#pending.size > 0) this.#kick()
    })
  }

  /** Resolves when every pending pipeline has been checked. */
  async idle(): Promise<void> {
    while (this.#working !== undefined) await this.#working
  }

  async #work(): Promise<void> {
    for (const name of this.#pending) {
      this.#pending.delete(name)
      try {
        await this.#reconcile(name)
      } catch (error) {
        this.#log("pipeline.reconcile-failed", { pipeline: name, error: errorMessage(error) })
        // Asked again on its next event, or on the informer's next relist.
      }
    }
  }

  async #reconcile(name: string): Promise<void> {
    const pipeline = this.#informer?.get(name)
    if (pipeline === undefined) return
    const generation = pipeline.metadata?.generation ?? 0
    const ready = pipeline.status?.conditions?.find((condition) => condition.type === "Ready")
    if (pipeline.status?.observedGeneration === generation && ready?.observedGeneration === generation) return
    const check = await checkPipelineContent(name, pipeline.spec)
    // A newer generation arrived while compiling: its own event is pending and will be checked instead.
    if ((this.#informer?.get(name)?.metadata?.generation ?? generation) !== generation) return
    // Before the status: a failure here leaves the generation unobserved, so it is tried again.
    await syncSchedules(this.#client, pipeline, declaredSchedules(pipeline, contentTypeOf(pipeline.spec)))
    const conditions = withCondition(pipeline.status?.conditions, {
      type: "Ready",
      ...check,
      lastTransitionTime: kubeTime(),
      observedGeneration: generation,
    })
    await this.#client.patchPipelineStatus(name, { observedGeneration: generation, conditions })
    this.#log("pipeline.checked", { pipeline: name, generation, ready: check.status, reason: check.reason })
  }
}
