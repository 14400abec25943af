import { errorMessage } from "../../../lib/core/errors.ts"
import type { GateStep } from "../../../lib/yaml/types.ts"
import { GateClosed, gatesDisabledMessage } from "../gates.ts"
import { lookupOf, noteError, type Outcome, type Scope } from "./scope.ts"
import { interpolateText } from "./vars.ts"

/**
 * gate: the job waits on an approval gate, as a script's `pipeline.gate()`
 * does. Approved, the step succeeds; rejected or expired (its `timeout`,
 * counted from the gate's creation), it fails, so `on_failure` hooks run.
 * With the `gates` feature off, the step fails too, saying so: a gate that
 * guards a release must never be passed silently.
 */
export async function runGateStep(step: GateStep, scope: Scope): Promise<Outcome> {
  const { context, deps } = scope.state.shared
  const say = (line: string) => context.console("stdout", `${line}\n`)
  let name: string
  let message: string | undefined
  try {
    const lookup = lookupOf(scope)
    name = await interpolateText(step.name, lookup, "the gate name")
    message = step.message === undefined ? undefined : await interpolateText(step.message, lookup, "message")
  } catch (error) {
    noteError(scope, `gate at ${step.at.path}: ${errorMessage(error)}`)
    return "error"
  }
  if (deps.gates === undefined) {
    say(`gate "${name}" failed: ${gatesDisabledMessage} (start the server with --allowed-features including gates)`)
    return "failure"
  }
  const timeoutMs = scope.deadline === undefined ? undefined : Math.max(1, scope.deadline - Date.now())
  try {
    const approval = await deps.gates.wait(
      {
        name,
        ...(message === undefined ? {} : { message }),
        ...(timeoutMs === undefined ? {} : { timeoutMs }),
        ...(step.approvers === undefined ? {} : { approvers: step.approvers }),
      },
      say,
      scope.signal,
    )
    say(`gate "${name}" approved by ${approval.by}${approval.comment === "" ? "" : `: ${approval.comment}`}`)
    return "success"
  } catch (error) {
    if (scope.signal.aborted) return "aborted"
    if (error instanceof GateClosed) {
      say(error.message)
      return "failure"
    }
    noteError(scope, `gate "${name}": ${errorMessage(error)}`)
    return "error"
  }
}
