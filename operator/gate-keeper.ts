import { compileExpression } from "../lib/cel/expression.ts"
import { formatDuration, parseDuration } from "../lib/core/duration.ts"
import { errorMessage, SystemError } from "../lib/core/errors.ts"
import type { Log } from "../lib/core/log.ts"
import type { Informer } from "../lib/kube/informer.ts"
import { isConflict, type ResourceClient } from "../lib/kube/resource-client.ts"
import {
  type GateObject,
  gateAnnotations,
  gateCreatedAt,
  gateId,
  isFinalGate,
  pipelineLabel,
  type RunObject,
  runLabel,
  runnelApiVersion,
  runOwnerReference,
} from "../lib/kube/resources.ts"
import { type GateApproval, GateClosed, type GateRequest, type RunGates } from "./engine/gates.ts"

export type GateKeeperOptions = {
  readonly client: Pick<ResourceClient, "getGate" | "createGate" | "patchGateStatus">
  readonly log: Log
}

/** How often a waiter reads its Gate even without a watch event: a missed event costs at most this. */
const rereadMs = 30_000

/**
 * Keeps Gates: creates them for waiting runs and resolves them.
 *
 * Level-triggered, like the run reconciler: every Gate event (and the first
 * list after a restart) is reconciled from the Gate alone:
 * - pending with a `spec.decision` (written by the API server's approve and
 *   reject, or by `kubectl patch`): the status gets the decision, who made it
 *   (`kubectl` when it names no one), the comment and the time;
 * - pending past its timeout (counted from its creation): `expired`, written
 *   by the run that waits on it, so a gate no run waits on does not expire
 *   (its run ended; nothing would continue);
 * - final: nothing.
 * Status writes carry the resourceVersion read, so a decision and an expiry
 * racing each other never both land: the loser re-reads and finds the gate final.
 */
export class GateKeeper {
  readonly #options: GateKeeperOptions
  #informer: Informer<GateObject> | undefined
  /** Waiting runs' wake-ups, by gate id. */
  readonly #waiters = new Map<string, Set<() => void>>()
  /**
   * How many changes of each gate this process has been told of: a wait that
   * began reading before a change resolves at once, where a wake-up that came
   * while it read (no waiter registered yet) would otherwise be lost.
   */
  readonly #changes = new Map<string, number>()

  constructor(options: GateKeeperOptions) {
    this.#options = options
  }

  attach(informer: Informer<GateObject>): void {
    this.#informer = informer
    for (const gate of informer.list()) this.changed(gate)
  }

  changed(gate: GateObject): void {
    const decision = gate.spec.decision
    if (!isFinalGate(gate) && decision !== undefined) {
      this.#resolve(gate, {
        phase: decision.phase,
        resolvedAt: new Date().toISOString(),
        resolvedBy: decision.by || "kubectl",
        comment: decision.comment ?? "",
      }).catch(() => {})
    }
    this.#wake(gate.metadata?.name ?? "")
  }

  deleted(gate: GateObject): void {
    const id = gate.metadata?.name ?? ""
    this.#wake(id)
    this.#changes.delete(id)
  }

  /** The gates of one run; `waiting` is told when the run starts and stops waiting on any gate. */
  forRun(run: RunObject, waiting: (gate: GateObject | undefined) => void): RunGates {
    let count = 0
    let pending = 0
    return {
      wait: async (request, notice, signal) => {
        // A gate nobody could ever approve is refused when asked for, where the pipeline sees why.
        if (request.approvers !== undefined) {
          try {
            compileExpression("rbac", request.approvers)
          } catch (error) {
            throw new Error(
              `gate "${request.name}": approvers ${JSON.stringify(request.approvers)}: ${errorMessage(error)}`,
            )
          }
        }
        const id = gateId(run.metadata?.name ?? "", ++count)
        const seen = this.#changes.get(id) ?? 0
        const gate = await this.#open(run, id, request, notice)
        pending++
        waiting(gate)
        try {
          return await this.#await(gate, seen, signal)
        } finally {
          if (--pending === 0) waiting(undefined)
        }
      },
    }
  }

  /** The run's gate `id`: found when a resumed run replays its call, else created. */
  async #open(run: RunObject, id: string, request: GateRequest, notice: (line: string) => void) {
    const { client } = this.#options
    const runName = run.metadata?.name ?? ""
    const found = this.#informer?.get(id) ?? (await client.getGate(id))
    if (found !== undefined) {
      if (found.spec.name !== request.name) {
        throw new SystemError(
          `the resumed run asked for gate "${request.name}" where its earlier attempt asked for gate "${found.spec.name}" (${id}); the script does not replay the same way, so it cannot be resumed; start a new run`,
        )
      }
      return found
    }
    const created = await client.createGate({
      apiVersion: runnelApiVersion,
      kind: "Gate",
      metadata: {
        name: id,
        labels: { [runLabel]: runName, [pipelineLabel]: run.spec.pipelineRef.name },
        annotations: { [gateAnnotations.createdAt]: new Date().toISOString() },
        ownerReferences: [{ ...runOwnerReference(run), controller: true }],
      },
      spec: {
        runRef: { name: runName },
        name: request.name,
        ...(request.message === undefined ? {} : { message: request.message }),
        ...(request.timeoutMs === undefined ? {} : { timeout: formatDuration(request.timeoutMs) }),
        ...(request.approvers === undefined ? {} : { approvers: request.approvers }),
      },
    })
    // A create does not write the status subresource: `pending` is written on its own, so kubectl shows it.
    // A decision that landed first wins (409): the wait reads the gate again.
    const pending = await client
      .patchGateStatus(created, { phase: "pending", resolvedAt: null, resolvedBy: "" })
      .catch((error: unknown) => {
        if (isConflict(error)) return undefined
        throw error
      })
    const timeout = request.timeoutMs === undefined ? "" : `, expires in ${formatDuration(request.timeoutMs)}`
    notice(
      `waiting for approval of gate "${request.name}" (id ${id}${timeout}): approve with POST /api/gates/${id}/approve or \`runnel gate approve ${id}\`, reject with /reject or \`runnel gate reject ${id}\``,
    )
    this.#options.log("gate.created", { run: runName, gate: id, name: request.name })
    return pending ?? created
  }

  /**
   * Waits until `gate` is final: approved resolves, rejected or expired throws GateClosed.
   * `seen` is the gate's change count from before `first` was read.
   */
  async #await(first: GateObject, seen: number, signal: AbortSignal): Promise<GateApproval> {
    const id = first.metadata?.name ?? ""
    let gate: GateObject | undefined = first
    for (;;) {
      signal.throwIfAborted()
      if (gate === undefined) {
        throw new SystemError(`gate ${id} was deleted while the run waited on it; start a new run`)
      }
      if (isFinalGate(gate)) return outcome(gate)
      const timeout = gate.spec.timeout === undefined ? undefined : parseDuration(gate.spec.timeout)
      const leftMs = timeout === undefined ? Number.POSITIVE_INFINITY : gateCreatedAt(gate) + timeout - Date.now()
      if (leftMs <= 0) {
        await this.#resolve(gate, { phase: "expired", resolvedAt: new Date().toISOString(), resolvedBy: "" })
      } else {
        await this.#changeOf(id, seen, Math.min(leftMs, rereadMs), signal)
      }
      seen = this.#changes.get(id) ?? 0
      gate = this.#informer?.get(id)
      // The cache may lag behind a write this process made: read the API itself when it shows no outcome.
      if (gate === undefined || !isFinalGate(gate)) gate = await this.#options.client.getGate(id)
    }
  }

  /** Resolves after `ms`, on a change of gate `id` (at once if it changed since its count was `seen`), or when `signal` aborts. */
  #changeOf(id: string, seen: number, ms: number, signal: AbortSignal): Promise<void> {
    if ((this.#changes.get(id) ?? 0) !== seen) return Promise.resolve()
    return new Promise((resolve) => {
      const waiters = this.#waiters.get(id) ?? new Set()
      this.#waiters.set(id, waiters)
      const done = () => {
        clearTimeout(timer)
        signal.removeEventListener("abort", done)
        waiters.delete(done)
        if (waiters.size === 0) this.#waiters.delete(id)
        resolve()
      }
      const timer = setTimeout(done, ms)
      signal.addEventListener("abort", done, { once: true })
      waiters.add(done)
    })
  }

  #wake(id: string): void {
    this.#changes.set(id, (this.#changes.get(id) ?? 0) + 1)
    for (const wake of [...(this.#waiters.get(id) ?? [])]) wake()
  }

  /** Writes a final status; losing to another write (409) is fine: the gate is final or is read again. */
  async #resolve(gate: GateObject, status: NonNullable<GateObject["status"]>): Promise<void> {
    try {
      await this.#options.client.patchGateStatus(gate, status)
      this.#options.log("gate.resolved", { gate: gate.metadata?.name, phase: status.phase, by: status.resolvedBy })
    } catch (error) {
      if (isConflict(error)) return
      this.#options.log("gate.resolve-failed", { gate: gate.metadata?.name, error: errorMessage(error) })
      throw error
    }
  }
}

function outcome(gate: GateObject): GateApproval {
  const id = gate.metadata?.name ?? ""
  const by = gate.status?.resolvedBy || "anonymous"
  const comment = gate.status?.comment ?? ""
  const said = comment === "" ? "" : `: ${comment}`
  switch (gate.status?.phase) {
    case "approved":
      return { id, by, comment }
    case "rejected":
      throw new GateClosed("rejected", `gate "${gate.spec.name}" (${id}) was rejected by ${by}${said}`)
    default:
      throw new GateClosed(
        "expired",
        `gate "${gate.spec.name}" (${id}) expired: nobody approved it within ${gate.spec.timeout ?? "its timeout"}`,
      )
  }
}
