import { compileExpression, type Expression, ExpressionError } from "../lib/cel/expression.ts"
import { RunnelError } from "../lib/core/errors.ts"
import type { Log } from "../lib/core/log.ts"
import type { GateObject, PipelineObject } from "../lib/kube/resources.ts"
import type { RequestUser } from "./auth/user.ts"

/** What a request wants to reach: the server itself, a pipeline (its runs, secrets, schedules, gates), a gate's decision. */
export type AccessTarget = {
  readonly pipeline?: PipelineObject | undefined
  /** Deciding this gate: its `approvers` expression applies on top of the pipeline's. */
  readonly decide?: GateObject
  /** The embedded Kubernetes API at /k8s, an admin surface: `--k8s-admin-rbac` decides. */
  readonly kubernetesApi?: true
}

/** "allowed", or why not, as the 403 says it. */
export type Verdict = "allowed" | { readonly forbidden: string }

/** Distinct expressions kept compiled; a server has a handful (one per pipeline, gate rule and the server's). */
const compiledLimit = 1_000

/**
 * Who may do what: the one function that decides every case of
 * interface.md's "Authorization (RBAC)", for REST routes, MCP tools and
 * gates alike (contract.md section 4, "Access"). Rules, in order:
 * - Open access (the user is not authenticated): no RBAC applies, except a
 *   gate's `approvers`, which an anonymous user matches only when it holds
 *   for empty fields.
 * - `--server-rbac`: an authenticated user who fails it is refused everything.
 * - A pipeline's `rbac_expression`: a user who fails it may not see the
 *   pipeline, its runs, secrets, schedules or gates; a Basic Auth user has
 *   no provider identity to test, so such a pipeline is refused to them.
 * - A gate's `approvers`, for deciding it.
 * - `--k8s-admin-rbac`, for the embedded Kubernetes API (none without it).
 * An expression that fails at evaluation (or no longer compiles, applied
 * with kubectl) counts as false and is logged; nothing about the user or
 * their credentials goes to the log but their actor.
 */
export class AccessPolicy {
  readonly #server: Expression<"rbac"> | undefined
  readonly #kubernetesAdmins: Expression<"rbac"> | undefined
  readonly #log: Log
  readonly #compiled = new Map<string, Expression<"rbac"> | ExpressionError>()
  /** --server-rbac's verdict per user object (one per request, the Basic user for good): a list asks once, not per item. */
  readonly #admitted = new WeakMap<RequestUser, boolean>()

  /** Throws a 400 ExpressionError naming the flag and the position for a rule that does not compile. */
  constructor(options: { serverRbac?: string | undefined; kubernetesAdmins?: string | undefined; log: Log }) {
    this.#log = options.log
    this.#server = flagRule("server-rbac", options.serverRbac)
    this.#kubernetesAdmins = flagRule("k8s-admin-rbac", options.kubernetesAdmins)
  }

  /** The one decision: may `user` reach `target`? */
  decide(user: RequestUser, target: AccessTarget = {}): Verdict {
    if (user.authenticated && !this.#admits(user)) {
      return { forbidden: `this server admits only users matching its --server-rbac rule, and ${user.actor} does not` }
    }
    const { pipeline, decide: gate } = target
    const rbac = pipeline?.spec.rbacExpression
    if (pipeline !== undefined && user.authenticated && rbac !== undefined && rbac !== "") {
      const name = pipeline.metadata?.name ?? ""
      if (user.Provider === "basic") {
        return {
          forbidden: `pipeline "${name}" has an rbac_expression, and Basic Auth users have no provider identity to match it (interface.md); to open it to them, remove spec.rbacExpression with kubectl`,
        }
      }
      if (!this.#holds(this.#expression(rbac), user, `pipeline ${name}`)) {
        return {
          forbidden: `you (${user.actor}) may not see pipeline "${name}": you do not match its rbac_expression; ask its owner to widen it`,
        }
      }
    }
    if (target.kubernetesApi === true && user.authenticated) {
      if (this.#kubernetesAdmins === undefined) {
        return {
          forbidden: `the Kubernetes API of this runnel server answers no user yet: start the server with --k8s-admin-rbac EXPR (a CEL expression such as 'NickName == "${user.NickName}"') naming its admins`,
        }
      }
      if (!this.#holds(this.#kubernetesAdmins, user, "--k8s-admin-rbac")) {
        return {
          forbidden: `user "${user.actor}" is not an admin of this runnel server's Kubernetes API: it answers only users who match --k8s-admin-rbac`,
        }
      }
    }
    const approvers = gate?.spec.approvers
    if (gate !== undefined && approvers !== undefined && approvers !== "") {
      if (!this.#holds(this.#expression(approvers), user, `gate ${gate.metadata?.name}`)) {
        const how = user.authenticated
          ? ""
          : `; this server has no authentication, so decide it with kubectl patch gate ${gate.metadata?.name} --type merge -p '{"spec":{"decision":{"phase":"approved","by":"NAME"}}}'`
        return { forbidden: `gate "${gate.spec.name}" may be decided only by users matching ${approvers}${how}` }
      }
    }
    return "allowed"
  }

  /** decide(), as a 403 RunnelError when refused. */
  check(user: RequestUser, target: AccessTarget = {}): void {
    const verdict = this.decide(user, target)
    if (verdict !== "allowed") throw new RunnelError(403, "forbidden", verdict.forbidden)
  }

  /** Whether `user` may see `pipeline` (and its runs): lists and searches leave out the rest. */
  mayView(user: RequestUser, pipeline: PipelineObject | undefined): boolean {
    return this.decide(user, { pipeline }) === "allowed"
  }

  #admits(user: RequestUser): boolean {
    if (this.#server === undefined) return true
    let admitted = this.#admitted.get(user)
    if (admitted === undefined) {
      admitted = this.#holds(this.#server, user, "--server-rbac")
      this.#admitted.set(user, admitted)
    }
    return admitted
  }

  #holds(expression: Expression<"rbac"> | ExpressionError, user: RequestUser, where: string): boolean {
    const logError = (error: ExpressionError) =>
      this.#log("access.rbac-error", { rule: where, actor: user.actor, error: error.message })
    if (expression instanceof ExpressionError) {
      logError(expression)
      return false
    }
    return expression.evaluate(user, logError)
  }

  /** A pipeline's or gate's expression, compiled once; one that does not compile is kept as its error. */
  #expression(source: string): Expression<"rbac"> | ExpressionError {
    let compiled = this.#compiled.get(source)
    if (compiled === undefined) {
      try {
        compiled = compileExpression("rbac", source)
      } catch (error) {
        compiled = error instanceof ExpressionError ? error : new ExpressionError("invalid_expression", String(error))
      }
      if (this.#compiled.size >= compiledLimit) this.#compiled.delete(this.#compiled.keys().next().value as string)
      this.#compiled.set(source, compiled)
    }
    return compiled
  }
}

/** A rule given by a flag, compiled at start: a mistake stops the server with the flag's name and the position. */
function flagRule(flag: string, source: string | undefined): Expression<"rbac"> | undefined {
  if (source === undefined) return undefined
  try {
    return compileExpression("rbac", source)
  } catch (error) {
    if (error instanceof ExpressionError) {
      throw new ExpressionError(error.code, `--${flag}: ${error.message}`, error.position, { cause: error })
    }
    throw error
  }
}
