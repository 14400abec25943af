import type { PipelineObject } from "../lib/kube/resources.ts"
import { anonymousActor } from "./audit.ts"

/**
 * What one request's user may see: the one place that decides it, so that
 * every list, search and tool asks the same question (contract.md section 4,
 * "Access"). A pipeline the user may not view is absent from every list and
 * search, and refused (403) where it or one of its runs is named.
 *
 * The server has no authentication yet (issue 11): `openAccess` lets everyone
 * see everything, as interface.md's open-access mode says. Authentication
 * plugs in by giving the API server another `Authorize`: it reads the
 * Authorization header (Bearer or Basic), throws a 401 RunnelError when it is
 * missing or wrong, and answers an Access whose `mayView` evaluates the
 * pipeline's `rbac_expression` for that user.
 */
export type Access = {
  /** The audit actor, `<provider>:<user>`, or `anonymous` in open access. */
  readonly actor: string
  /** Whether the user may see this pipeline, its runs and their output. */
  mayView(pipeline: PipelineObject): boolean
}

/** Who is asking, from the request's Authorization header (undefined when absent). */
export type Authorize = (authorization: string | undefined) => Access | Promise<Access>

/** Open access: no credentials asked for, every pipeline visible. */
export const openAccess: Authorize = () => ({ actor: anonymousActor, mayView: () => true })
