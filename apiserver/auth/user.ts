import type { RbacVariables } from "../../lib/cel/expression.ts"
import { anonymousActor } from "../audit.ts"

/**
 * Who a request comes from: the RBAC variables of interface.md ("Authenticated
 * user"), and the actor the audit log and a gate's `resolved_by` name.
 */
export type RequestUser = RbacVariables & {
  /** `<provider>:<user>` (`basic:alice`, `github:octocat`), or `anonymous` in open access. */
  readonly actor: string
  /** False in open access (no authentication configured): pipeline RBAC does not apply then. */
  readonly authenticated: boolean
}

/** Everyone in open access. */
export const anonymousUser: RequestUser = Object.freeze({
  Email: "",
  Name: anonymousActor,
  NickName: "",
  Provider: "",
  UserID: "",
  Organizations: [],
  Groups: [],
  actor: anonymousActor,
  authenticated: false,
})

/** The one user of Basic Auth: no provider fields beyond the name, so no pipeline RBAC (interface.md). */
export function basicUser(username: string): RequestUser {
  return {
    Email: "",
    Name: username,
    NickName: username,
    Provider: "basic",
    UserID: username,
    Organizations: [],
    Groups: [],
    actor: `basic:${username}`,
    authenticated: true,
  }
}

/** A user a provider vouched for (a browser login, or a JWT issued after one). */
export function providerUser(fields: RbacVariables): RequestUser {
  return { ...fields, actor: `${fields.Provider}:${fields.NickName}`, authenticated: true }
}
