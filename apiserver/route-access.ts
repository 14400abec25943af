import type { RouterMiddleware } from "@koa/router"
import { notFound } from "../lib/core/errors.ts"
import type { ResourceClient } from "../lib/kube/resource-client.ts"
import {
  type GateObject,
  type PipelineObject,
  pipelineLabel,
  type RunObject,
  type ScheduleObject,
} from "../lib/kube/resources.ts"
import type { AccessPolicy } from "./access.ts"
import { requestUser } from "./auth/authenticate.ts"
import { findPipeline, isResourceName } from "./find-pipeline.ts"
import type { ResourceIndex } from "./resource-index.ts"

/**
 * What a route checks before its handler runs. Every route of the API puts
 * one of these middlewares in front of its handler (test/route-access.test.ts
 * walks the router and fails for a route without one):
 * - `user`: any user the server admits (its --server-rbac); the handler lists
 *   only what `policy.mayView` allows.
 * - `pipeline`, `run`, `schedule`, `gate`: the path names one; 404 when it
 *   does not exist, 403 when the user may not see its pipeline; the object is
 *   left in `ctx.state` for the handler (`state.pipeline`, `state.run`, ...).
 * - `new-pipeline`: as `pipeline`, except that a pipeline that does not exist
 *   yet is fine (PUT creates it); `state.pipeline` is then undefined.
 * - `signature`: no user: an incoming webhook proves itself by its signature.
 * - `login`: no user yet: /auth is how one logs in (it reads the session cookie itself where it needs one).
 * - `page`: no user and no data: the web UI's HTML page and assets (apiserver/ui/), loaded before the
 *   browser login so that the API calls they make, each checked here, can send the browser to it.
 */
export const accessRule = Symbol("runnel.accessRule")
export type RouteRule =
  | "user"
  | "pipeline"
  | "new-pipeline"
  | "run"
  | "schedule"
  | "gate"
  | "signature"
  | "login"
  | "page"

/** A route's check, tagged with its rule. */
export type RouteCheck = RouterMiddleware & { readonly [accessRule]: RouteRule }

export type RouteAccessDeps = {
  policy: AccessPolicy
  resources: Pick<ResourceClient, "getPipeline" | "getRun" | "getSchedule" | "getGate" | "list">
  index: Pick<ResourceIndex, "pipelines">
}

const check = (rule: RouteRule, find: (ctx: Parameters<RouterMiddleware>[0]) => Promise<void>): RouteCheck =>
  Object.assign<RouterMiddleware, { [accessRule]: RouteRule }>(
    async (ctx, next) => {
      await find(ctx)
      await next()
    },
    { [accessRule]: rule },
  )

/** The check of a route that asks for no user: it says so, for the test that walks the routes. */
export const withoutUser = (rule: "signature" | "login" | "page"): RouteCheck => check(rule, async () => {})

/** The checks of the routes, each asking the one AccessPolicy. */
export function routeAccess({ policy, resources, index }: RouteAccessDeps) {
  const pipelineNamed = (name: string) => index.pipelines.get(name)
  const pipelineOf = async (key: string, required: boolean) => {
    const pipeline = await findPipeline(resources, index.pipelines, key)
    if (pipeline === undefined && required) throw notFound("pipeline", key)
    return pipeline
  }
  const param = (ctx: { params: Record<string, string | undefined> }) => ctx.params.name ?? ctx.params.id ?? ""

  return {
    user: check("user", async (ctx) => policy.check(requestUser(ctx))),
    pipeline: check("pipeline", async (ctx) => {
      const pipeline = await pipelineOf(param(ctx), true)
      policy.check(requestUser(ctx), { pipeline })
      ctx.state.pipeline = pipeline
    }),
    newPipeline: check("new-pipeline", async (ctx) => {
      const pipeline = await pipelineOf(param(ctx), false)
      policy.check(requestUser(ctx), { pipeline })
      ctx.state.pipeline = pipeline
    }),
    run: check("run", async (ctx) => {
      const id = ctx.params.id ?? ""
      // A key that cannot be a Run's name is not sent to the Kubernetes API at all.
      const run = isResourceName(id) ? await resources.getRun(id) : undefined
      if (run === undefined) throw notFound("run", id)
      policy.check(requestUser(ctx), { pipeline: pipelineNamed(run.spec.pipelineRef.name) })
      ctx.state.run = run
    }),
    schedule: check("schedule", async (ctx) => {
      // `:id` is the schedule's id (metadata.uid) or its name, as pipelines take either.
      const key = ctx.params.id ?? ""
      const schedule =
        (isResourceName(key) ? await resources.getSchedule(key) : undefined) ??
        (await resources.list<ScheduleObject>("schedules")).items.find((candidate) => candidate.metadata?.uid === key)
      if (schedule === undefined)
        throw notFound("schedule", key, "list a pipeline's schedules with GET /api/pipelines/:id/schedules")
      policy.check(requestUser(ctx), { pipeline: pipelineNamed(schedule.spec.pipelineRef.name) })
      ctx.state.schedule = schedule
    }),
    gate: check("gate", async (ctx) => {
      const id = ctx.params.id ?? ""
      const gate = isResourceName(id) ? await resources.getGate(id) : undefined
      if (gate === undefined) throw notFound("gate", id)
      policy.check(requestUser(ctx), { pipeline: gatePipeline(index, gate) })
      ctx.state.gate = gate
    }),
    signature: withoutUser("signature"),
  }
}

export type RouteAccess = ReturnType<typeof routeAccess>

/** The pipeline a gate belongs to, from its label. */
export const gatePipeline = (index: Pick<ResourceIndex, "pipelines">, gate: GateObject) =>
  index.pipelines.get(gate.metadata?.labels?.[pipelineLabel] ?? "")

/** What a route's check left for its handler. */
export const checked = {
  pipeline: (state: Record<string, unknown>) => state.pipeline as PipelineObject,
  maybePipeline: (state: Record<string, unknown>) => state.pipeline as PipelineObject | undefined,
  run: (state: Record<string, unknown>) => state.run as RunObject,
  schedule: (state: Record<string, unknown>) => state.schedule as ScheduleObject,
  gate: (state: Record<string, unknown>) => state.gate as GateObject,
}
