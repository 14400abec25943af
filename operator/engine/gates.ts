/** What a pipeline asks for: `pipeline.gate({name, message?, timeout?, approvers?})`, or a YAML `gate` step. */
export type GateRequest = {
  readonly name: string
  readonly message?: string
  /** Counted from the gate's creation; absent, the gate waits until resolved or the run is stopped. */
  readonly timeoutMs?: number
  /** A CEL expression over the user that an approver must satisfy (checked by the API server). */
  readonly approvers?: string
}

/** An approved gate: who approved it and what they said. */
export type GateApproval = { readonly id: string; readonly by: string; readonly comment: string }

/**
 * A gate that was rejected or expired. The pipeline may catch it (a script's
 * `try`, YAML's `on_failure`); uncaught, the run is a `failure` with this message.
 */
export class GateClosed extends Error {
  readonly phase: "rejected" | "expired"
  constructor(phase: "rejected" | "expired", message: string) {
    super(message)
    this.name = "GateClosed"
    this.phase = phase
  }
}

/** The message the `gates` feature's absence gives, as interface.md's other feature errors do. */
export const gatesDisabledMessage = "gates feature is not enabled"

/**
 * The approval gates of one run, as the engines see them.
 * - wait() creates the run's next gate, numbered in call order (a resumed run
 *   replays its calls in the same order and so finds the gates it created
 *   before, resolved or still pending), and settles when a person decides:
 *   resolves on approval, rejects with GateClosed on rejection or expiry,
 *   with the signal's reason when the run is stopped, and with a SystemError
 *   when runnel cannot keep the gate.
 * - `notice` is called once, with one line for the run's console, when the
 *   gate is created (not again when a resumed run finds it).
 * - While any wait is pending the run holds no `--max-in-flight` slot, and its
 *   script's `--pipeline-timeout` clock is paused.
 */
export interface RunGates {
  wait(request: GateRequest, notice: (line: string) => void, signal: AbortSignal): Promise<GateApproval>
}
