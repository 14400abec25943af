import Router from "@koa/router"
import { badRequest } from "../../lib/core/errors.ts"
import { runStatuses } from "../../lib/core/status.ts"
import type { ResourceClient } from "../../lib/kube/resource-client.ts"
import type { RunObject } from "../../lib/kube/resources.ts"
import type { LogStore } from "../../lib/logs/log-store.ts"
import type { AccessPolicy } from "../access.ts"
import { requestUser } from "../auth/authenticate.ts"
import type { ResourceIndex } from "../resource-index.ts"
import { checked, type RouteAccess } from "../route-access.ts"
import { stopRun } from "../stop-run.ts"
import { pageEnvelope, pageOf, queryString, runView, taskRecords, taskView, visibleRuns } from "../views.ts"

export type RunRoutesDeps = {
  resources: Pick<ResourceClient, "patchRun">
  index: Pick<ResourceIndex, "pipelines" | "runs">
  logs: Pick<LogStore, "tasks" | "output">
  policy: Pick<AccessPolicy, "mayView">
  access: RouteAccess
}

/** Runs over the Run resource, their tasks' output from the log store (contract.md sections 4 and 7). */
export function runRoutes({ resources, index, logs, policy, access }: RunRoutesDeps): Router {
  const router = new Router()
  const pipelineIds = () => new Map(index.pipelines.list().map((p) => [p.metadata?.name ?? "", p.metadata?.uid ?? ""]))
  const view = (run: RunObject) => runView(run, pipelineIds())

  router.get("/api/runs", access.user, async (ctx) => {
    const page = pageOf(ctx.query)
    const status = queryString(ctx.query, "status")
    if (status !== undefined && !(runStatuses as readonly string[]).includes(status)) {
      throw badRequest(`?status=${status} is not a run status; known: ${runStatuses.join(", ")}`)
    }
    const pipeline = pipelineName(queryString(ctx.query, "pipeline_id"))
    const ids = pipelineIds()
    const user = requestUser(ctx)
    const { items, total } = visibleRuns(
      index,
      (candidate) => policy.mayView(user, candidate),
      { status, pipeline },
      (page.page - 1) * page.perPage,
      page.perPage,
    )
    ctx.body = pageEnvelope(
      items.map((run) => runView(run, ids)),
      total,
      page,
    )
  })

  for (const path of ["/api/runs/:id", "/api/runs/:id/status"]) {
    router.get(path, access.run, async (ctx) => {
      ctx.body = view(checked.run(ctx.state))
    })
  }

  router.get("/api/runs/:id/tasks", access.run, async (ctx) => {
    const run = checked.run(ctx.state)
    const id = run.metadata?.name ?? ""
    // `?output=false` leaves the output out: a page that follows the log over SSE should not fetch 200 MB twice.
    const output = queryString(ctx.query, "output")
    if (output !== undefined && output !== "true" && output !== "false") {
      throw badRequest(`?output=${output} is not valid; give true (the default) or false`)
    }
    ctx.body = taskRecords(run, logs).map((task) =>
      output === "false"
        ? withoutOutput(taskView(task, "", ""))
        : taskView(task, logs.output(id, task.path, "stdout"), logs.output(id, task.path, "stderr")),
    )
  })

  router.post("/api/runs/:id/stop", access.run, async (ctx) => {
    ctx.body = view(await stopRun({ resources, index }, checked.run(ctx.state)))
  })

  /** `?pipeline_id=` takes the pipeline's id or its name; an id of no pipeline selects no run. */
  const pipelineName = (key: string | undefined): string | undefined =>
    key === undefined ? undefined : (index.pipelines.find((p) => p.metadata?.uid === key)?.metadata?.name ?? key)

  return router
}

/** A task object without its stdout and stderr fields (rather than empty ones, which would say it printed nothing). */
function withoutOutput({ stdout: _stdout, stderr: _stderr, ...task }: ReturnType<typeof taskView>) {
  return task
}
