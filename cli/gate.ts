import type { ApiClient } from "./api-client.ts"
import { table } from "./pipeline.ts"

// `runnel gate ...`: approval gates over the REST API (docs/gates.md). cli/program.ts registers the
// commands and loads this module when one runs.

type Gate = {
  id: string
  run_id: string
  name: string
  status: string
  message: string
  created_at: string
  resolved_by: string | null
  comment: string
}

/** `gate ls [RUN]`: the gates of one run, or the pending gates of every run. */
export async function listGates(api: ApiClient, run: string | undefined, json: boolean) {
  const path = run === undefined ? "/api/gates?status=pending" : `/api/runs/${encodeURIComponent(run)}/gates`
  const gates = (await api.call("GET", path)).body as Gate[]
  if (json) {
    process.stdout.write(`${JSON.stringify(gates, null, 2)}\n`)
    return
  }
  if (gates.length === 0) {
    process.stdout.write(run === undefined ? "no gate is pending\n" : `run ${run} has no gates\n`)
    return
  }
  process.stdout.write(
    table([
      ["ID", "RUN", "NAME", "STATUS", "BY", "CREATED", "MESSAGE"],
      ...gates.map((g) => [g.id, g.run_id, g.name, g.status, g.resolved_by ?? "", g.created_at, g.message]),
    ]),
  )
}

/** `gate approve|reject ID [-m COMMENT]`. */
export async function decideGate(api: ApiClient, action: "approve" | "reject", id: string, comment?: string) {
  const answer = await api.call(
    "POST",
    `/api/gates/${encodeURIComponent(id)}/${action}`,
    comment === undefined ? {} : { comment },
  )
  const gate = answer.body as Gate
  const by = gate.resolved_by === null ? "" : ` by ${gate.resolved_by}`
  process.stdout.write(`gate "${gate.name}" (${gate.id}) of run ${gate.run_id}: ${gate.status}${by}\n`)
}
