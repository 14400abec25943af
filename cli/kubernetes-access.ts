import type { IncomingMessage } from "node:http"
import { authenticator } from "../apiserver/auth/authenticate.ts"
import type { RequestUser } from "../apiserver/auth/user.ts"
import type { Authenticated } from "../kubeserver/embedded-api.ts"
import { forbidden, KubeStatusError } from "../kubeserver/kube-status.ts"
import { compileExpression, type Expression } from "../lib/cel/expression.ts"
import type { AuthSettings } from "../lib/config/auth.ts"
import { badRequest, RunnelError } from "../lib/core/errors.ts"
import type { Log } from "../lib/core/log.ts"
import { sameSecret } from "../lib/crypto/same-secret.ts"

/**
 * Who may use `runnel server`'s embedded Kubernetes API at /k8s, an admin
 * surface (it hands out every Pipeline, Run and core Secret): the embedded
 * API's authenticate hook.
 * - runnel's own operator and API server in this process, by `processToken`,
 *   a random token only the process knows (compared in constant time);
 * - in open access, everyone, as before;
 * - with authentication on, only users the Authorization header proves
 *   (Bearer under OAuth, Basic under Basic Auth: no session cookie, /k8s is
 *   no browser page) who pass `--k8s-admin-rbac` (and `--server-rbac` when
 *   set). No credentials, or wrong ones: 401. No `--k8s-admin-rbac`: 403
 *   naming the flag. A user who fails it: 403.
 * Basic Auth's one user is judged by the same expression, as `Name`,
 * `NickName` and `UserID` equal to the user name and `Provider` "basic".
 * The hook answers the user's actor, which the embedded API records on
 * what they change (changedByAnnotation) for the audit log.
 */
export function kubernetesAccess({
  auth,
  processToken,
  prefix,
  log,
}: {
  auth: AuthSettings
  processToken: string
  /** Where the embedded API is mounted: "/k8s". */
  prefix: string
  log: Log
}): (req: IncomingMessage) => Promise<Authenticated> {
  const authenticate = authenticator(auth)
  const rules = [
    ...(auth.serverRbac === undefined ? [] : [compiled("server-rbac", auth.serverRbac)]),
    ...(auth.kubernetesAdmins === undefined ? [] : [compiled("k8s-admin-rbac", auth.kubernetesAdmins)]),
  ]
  const passes = (user: RequestUser) =>
    rules.every(({ flag, expression }) =>
      expression.evaluate(user, (error) =>
        log("kubernetes.rbac.error", { flag: `--${flag}`, actor: user.actor, error: error.message }),
      ),
    )
  return async (req) => {
    const authorization = req.headers.authorization
    if (authorization !== undefined && sameSecret(authorization, `Bearer ${processToken}`)) return true
    if (auth.mode === "open") return true
    let user: RequestUser
    try {
      user = await authenticate({ authorization })
    } catch (error) {
      if (error instanceof RunnelError && error.status === 401) {
        throw new KubeStatusError(401, "Unauthorized", `Unauthorized: ${error.message}`)
      }
      throw error
    }
    // Discovery (which kinds exist, as the CRDs in the repository say) is open to every user who proved who
    // they are, as a cluster's system:discovery role does: kubectl then meets the 403 on the resource itself
    // and prints its message, where a 403 on discovery shows as "unknown".
    if (isDiscovery(req, prefix)) return user.actor
    if (auth.kubernetesAdmins === undefined) {
      throw forbidden(
        `the Kubernetes API of this runnel server answers no user yet: start the server with --k8s-admin-rbac EXPR (a CEL expression such as 'NickName == "${user.NickName}"') naming its admins`,
      )
    }
    if (!passes(user)) {
      throw forbidden(
        `user "${user.actor}" is not an admin of this runnel server's Kubernetes API: it answers only users who match --k8s-admin-rbac`,
      )
    }
    return user.actor
  }
}

/** A read of the embedded API's discovery documents: /version, /api, /api/v1, /apis, /apis/GROUP[/VERSION], /openapi/... */
function isDiscovery(req: IncomingMessage, prefix: string): boolean {
  if (req.method !== "GET" && req.method !== "HEAD") return false
  const path = ((req.url ?? "").split("?")[0] ?? "").slice(prefix.length)
  return /^\/(version|api|api\/v1|apis|apis\/[^/]+|apis\/[^/]+\/[^/]+|openapi\/.*)\/?$/.test(path)
}

/** A rule compiled at start, so a mistake in it stops the server with the flag's name and the position. */
function compiled(flag: string, source: string): { flag: string; expression: Expression<"rbac"> } {
  try {
    return { flag, expression: compileExpression("rbac", source) }
  } catch (error) {
    throw badRequest(`--${flag}: ${error instanceof Error ? error.message : String(error)}`)
  }
}
