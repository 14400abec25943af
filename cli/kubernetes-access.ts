import type { AccessPolicy } from "../apiserver/access.ts"
import { authenticator } from "../apiserver/auth/authenticate.ts"
import type { FailureCounter } from "../apiserver/auth/failure-counter.ts"
import type { RequestUser } from "../apiserver/auth/user.ts"
import type { Authenticated } from "../kubeserver/embedded-api.ts"
import type { ApiRequest } from "../kubeserver/http-exchange.ts"
import { forbidden, KubeStatusError } from "../kubeserver/kube-status.ts"
import type { AuthSettings } from "../lib/config/auth.ts"
import { RunnelError } from "../lib/core/errors.ts"
import { matchesSecret } from "../lib/crypto/same-secret.ts"

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
  policy,
  failures,
  processToken,
  prefix,
}: {
  auth: AuthSettings
  /** The one access decision (apiserver/access.ts): `--server-rbac`, then `--k8s-admin-rbac`. */
  policy: Pick<AccessPolicy, "decide">
  /** The API's count of failed credentials per address: a guesser is slowed here as there (429). */
  failures: FailureCounter
  processToken: string
  /** Where the embedded API is mounted: "/k8s". */
  prefix: string
}): (req: ApiRequest) => Promise<Authenticated> {
  const authenticate = authenticator(auth)
  const isProcessToken = matchesSecret(`Bearer ${processToken}`)
  return async (req) => {
    const authorization = req.headers.authorization
    if (authorization !== undefined && isProcessToken(authorization)) return true
    if (auth.mode === "open") return true
    // The peer address, as the API's Koa app takes it (no proxy headers trusted).
    const address = req.socket.remoteAddress ?? ""
    const waitMs = failures.blockedFor(address, Date.now())
    if (waitMs > 0) {
      const seconds = Math.ceil(waitMs / 1000)
      throw new KubeStatusError(
        429,
        "TooManyRequests",
        `too many failed authentication attempts from this address; try again in ${seconds} s`,
        { retryAfterSeconds: seconds },
      )
    }
    let user: RequestUser
    try {
      user = await authenticate({ authorization })
    } catch (error) {
      if (error instanceof RunnelError && error.status === 401) {
        if (authorization !== undefined) failures.add(address, Date.now())
        throw new KubeStatusError(401, "Unauthorized", `Unauthorized: ${error.message}`)
      }
      throw error
    }
    // Discovery (which kinds exist, as the CRDs in the repository say) is open to every user who proved who
    // they are, as a cluster's system:discovery role does: kubectl then meets the 403 on the resource itself
    // and prints its message, where a 403 on discovery shows as "unknown".
    if (isDiscovery(req, prefix)) return user.actor
    const verdict = policy.decide(user, { kubernetesApi: true })
    if (verdict !== "allowed") throw forbidden(verdict.forbidden)
    return user.actor
  }
}

/** A read of the embedded API's discovery documents: /version, /api, /api/v1, /apis, /apis/GROUP[/VERSION], /openapi/... */
function isDiscovery(req: ApiRequest, prefix: string): boolean {
  if (req.method !== "GET" && req.method !== "HEAD") return false
  const path = ((req.url ?? "").split("?")[0] ?? "").slice(prefix.length)
  return /^\/(version|api|api\/v1|apis|apis\/[^/]+|apis\/[^/]+\/[^/]+|openapi\/.*)\/?$/.test(path)
}
