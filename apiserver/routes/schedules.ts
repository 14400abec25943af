import Router from "@koa/router"
import { badRequest, notFound } from "../../lib/core/errors.ts"
import type { ResourceClient } from "../../lib/kube/resource-client.ts"
import type { ScheduleObject } from "../../lib/kube/resources.ts"
import { objectBody, onlyFields } from "../body.ts"
import { checked, type RouteAccess } from "../route-access.ts"
import { scheduleView, updatedAtAnnotation } from "../views.ts"

export type ScheduleRoutesDeps = {
  resources: Pick<ResourceClient, "list" | "getSchedule" | "patchScheduleEnabled">
  access: RouteAccess
}

/**
 * Schedules (interface.md "Schedules"): listed per pipeline and enabled or
 * disabled. Both answer whatever the `schedules` feature says: with it off the
 * schedules are stored and listed, only never fired (the operator's part).
 */
export function scheduleRoutes({ resources, access }: ScheduleRoutesDeps): Router {
  const router = new Router()
  const all = async () => (await resources.list<ScheduleObject>("schedules")).items

  router.get("/api/pipelines/:id/schedules", access.pipeline, async (ctx) => {
    const pipeline = checked.pipeline(ctx.state)
    const name = pipeline.metadata?.name ?? ""
    const schedules = (await all())
      .filter((schedule) => schedule.spec.pipelineRef.name === name)
      .sort((a, b) => (a.metadata?.name ?? "").localeCompare(b.metadata?.name ?? ""))
    ctx.body = schedules.map((schedule) => scheduleView(schedule, pipeline.metadata?.uid ?? ""))
  })

  // `:id` is the schedule's id (metadata.uid) or its name, as pipelines take either.
  router.put("/api/schedules/:id/enabled", access.schedule, async (ctx) => {
    const body = objectBody(ctx.state.body, { required: true })
    onlyFields(body, ["enabled"])
    if (typeof body.enabled !== "boolean") {
      throw badRequest(
        `"enabled" must be true or false, not ${body.enabled === undefined ? "missing" : JSON.stringify(body.enabled)}`,
      )
    }
    const key = ctx.params.id ?? ""
    const schedule = checked.schedule(ctx.state)
    const name = schedule.metadata?.name ?? ""
    const patched = await resources.patchScheduleEnabled(name, body.enabled, {
      [updatedAtAnnotation]: new Date().toISOString(),
    })
    if (patched === undefined) throw notFound("schedule", key)
    ctx.body = { status: "ok" }
  })

  return router
}
