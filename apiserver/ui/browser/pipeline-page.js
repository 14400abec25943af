import { api, enc, get } from "./api.js"
import { badge, copy, duration, empty, fill, h, problem, render, time } from "./dom.js"
import { highlighted } from "./highlight.js"
import { triggerMenu } from "./trigger.js"

// One pipeline: its runs (paginated, by status), schedules, webhook URL, secret keys, pause, RBAC
// expression and source. Every change is a REST call; the server's answer is what the page shows.

const statuses = ["queued", "running", "success", "failure", "error", "aborted"]

export async function pipelinePage(name) {
  const [pipeline, { features }] = await Promise.all([get(`/api/pipelines/${enc(name)}`), get("/api/features")])
  const runs = h("section", { "aria-labelledby": "runs-title" })
  render(
    pipeline.name,
    h(
      "div",
      { class: "page-head" },
      h("h1", {}, pipeline.name),
      pipeline.paused ? badge("paused") : null,
      h("div", { class: "actions" }, pauseButton(pipeline), triggerMenu(pipeline)),
    ),
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "Type"),
      h("dd", {}, pipeline.content_type),
      h("dt", {}, "Driver"),
      h("dd", {}, pipeline.driver),
      h("dt", {}, "Updated"),
      h("dd", {}, time(pipeline.updated_at)),
      h("dt", {}, "Id"),
      h("dd", {}, h("code", {}, pipeline.id)),
    ),
    runs,
    await schedules(pipeline, features),
    webhook(pipeline, features),
    features.includes("secrets") ? await secrets(pipeline) : null,
    rbac(pipeline),
    h(
      "section",
      { "aria-labelledby": "source-title" },
      h("h2", { id: "source-title" }, "Source"),
      highlighted(pipeline.content, pipeline.content_type),
    ),
  )
  await showRuns(runs, pipeline, new URLSearchParams(location.search))
}

function pauseButton(pipeline) {
  const action = pipeline.paused ? "unpause" : "pause"
  const button = h("button", { type: "button" }, pipeline.paused ? "Unpause" : "Pause")
  button.addEventListener("click", async () => {
    try {
      await api("POST", `/api/pipelines/${enc(pipeline.id)}/${action}`)
      location.reload()
    } catch (error) {
      button.after(problem(error))
    }
  })
  return button
}

/** The runs section: a status filter and one page of runs, both kept in the URL (?status=, ?page=). */
async function showRuns(section, pipeline, query) {
  const status = query.get("status") ?? ""
  const page = Number(query.get("page") ?? "1") || 1
  const select = h(
    "select",
    { id: "status-filter" },
    h("option", { value: "" }, "any status"),
    statuses.map((s) => h("option", { value: s, selected: s === status }, s)),
  )
  select.addEventListener("change", () => {
    const next = new URLSearchParams(location.search)
    if (select.value === "") next.delete("status")
    else next.set("status", select.value)
    next.delete("page")
    location.search = next.toString()
  })
  const params = new URLSearchParams({ pipeline_id: pipeline.id, page: String(page), per_page: "20" })
  if (status !== "") params.set("status", status)
  const list = await get(`/api/runs?${params}`)
  const pager = (to, label) => {
    const next = new URLSearchParams(location.search)
    next.set("page", String(to))
    return h("a", { href: `?${next}` }, label)
  }
  fill(
    section,
    h("h2", { id: "runs-title" }, "Runs"),
    h("label", { for: "status-filter" }, "Status "),
    select,
    list.items.length === 0
      ? empty(
          status === "" ? "This pipeline has not run yet. Trigger it above, or:" : `No ${status} runs.`,
          status === "" ? `runnel pipeline trigger ${pipeline.name}` : null,
        )
      : runsTable(list.items),
    list.total_pages > 1
      ? h(
          "nav",
          { class: "pager", "aria-label": "Run pages" },
          page > 1 ? pager(page - 1, "← Newer") : null,
          h("span", {}, `page ${page} of ${list.total_pages}`),
          list.has_next ? pager(page + 1, "Older →") : null,
        )
      : null,
  )
}

export function runsTable(runs) {
  return h(
    "table",
    { class: "list" },
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        ["Run", "Status", "Trigger", "Started", "Duration"].map((n) => h("th", { scope: "col" }, n)),
      ),
    ),
    h(
      "tbody",
      {},
      runs.map((run) =>
        h(
          "tr",
          { "data-row": "" },
          h("td", {}, h("a", { href: `/runs/${enc(run.id)}` }, run.id)),
          h("td", {}, badge(run.status)),
          h("td", {}, run.triggered_by ? `${run.trigger_type} by ${run.triggered_by}` : run.trigger_type),
          h("td", {}, time(run.started_at ?? run.created_at)),
          h("td", {}, duration(run.started_at, run.finished_at)),
        ),
      ),
    ),
  )
}

async function schedules(pipeline, features) {
  const list = await get(`/api/pipelines/${enc(pipeline.id)}/schedules`)
  if (list.length === 0) return null
  const on = features.includes("schedules")
  return h(
    "section",
    { "aria-labelledby": "schedules-title" },
    h("h2", { id: "schedules-title" }, "Schedules"),
    on ? null : h("p", { class: "muted" }, "The schedules feature is off on this server: these never fire."),
    h(
      "table",
      { class: "list" },
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          ["Name", "Job", "When", "Next", "Last", "Enabled"].map((n) => h("th", { scope: "col" }, n)),
        ),
      ),
      h(
        "tbody",
        {},
        list.map((schedule) => {
          const toggle = h("input", {
            type: "checkbox",
            role: "switch",
            checked: schedule.enabled,
            "aria-label": `schedule ${schedule.name} enabled`,
          })
          toggle.addEventListener("change", async () => {
            try {
              await api("PUT", `/api/schedules/${enc(schedule.id)}/enabled`, { enabled: toggle.checked })
            } catch (error) {
              toggle.checked = !toggle.checked
              toggle.after(problem(error))
            }
          })
          return h(
            "tr",
            {},
            h("td", {}, schedule.name),
            h("td", {}, schedule.job_name || "—"),
            h("td", {}, h("code", {}, `${schedule.schedule_type} ${schedule.schedule_expr}`)),
            h("td", {}, time(schedule.next_run_at)),
            h("td", {}, time(schedule.last_run_at)),
            h("td", {}, toggle),
          )
        }),
      ),
    ),
  )
}

function webhook(pipeline, features) {
  const url = `${location.origin}/api/webhooks/${pipeline.id}`
  const button = h("button", { type: "button", onclick: () => copy(button, url) }, "Copy")
  return h(
    "section",
    { "aria-labelledby": "webhook-title" },
    h("h2", { id: "webhook-title" }, "Webhook"),
    features.includes("webhooks")
      ? [
          h("p", {}, h("code", { class: "url" }, url), " ", button),
          h(
            "p",
            { class: "muted" },
            pipeline.has_webhook_secret
              ? "Signed with this pipeline's webhook secret. "
              : "No webhook secret: requests are accepted unsigned. ",
            "How to set it up for each provider: docs/webhooks.md, section “Providers”.",
          ),
        ]
      : h("p", { class: "muted" }, "The webhooks feature is off on this server."),
  )
}

/** The fields a PUT must send back unchanged, plus `change`. */
const rewrite = (pipeline, change) => ({
  content: pipeline.content,
  content_type: pipeline.content_type,
  driver: pipeline.driver,
  driver_config: pipeline.driver_config,
  ...(pipeline.rbac_expression ? { rbac_expression: pipeline.rbac_expression } : {}),
  ...change,
})

async function secrets(pipeline) {
  const { keys: list } = await get(`/api/pipelines/${enc(pipeline.name)}/secrets`)
  // No pattern here: the server says which names it takes, and its message shows under the form.
  const key = h("input", { id: "secret-key", autocomplete: "off", required: true })
  const value = h("input", { id: "secret-value", type: "password", autocomplete: "new-password", required: true })
  const form = h(
    "form",
    { class: "inline" },
    h("label", { for: "secret-key" }, "Key"),
    key,
    h("label", { for: "secret-value" }, "Value"),
    value,
    h("button", { type: "submit" }, "Add secret"),
  )
  form.addEventListener("submit", async (event) => {
    event.preventDefault()
    try {
      await api(
        "PUT",
        `/api/pipelines/${enc(pipeline.name)}`,
        rewrite(pipeline, { secrets: { [key.value]: value.value } }),
      )
      location.reload()
    } catch (error) {
      form.querySelector(".problem")?.remove()
      form.append(problem(error))
    }
  })
  return h(
    "section",
    { "aria-labelledby": "secrets-title" },
    h("h2", { id: "secrets-title" }, "Secrets"),
    h("p", { class: "muted" }, "Values are write-only: stored encrypted, never shown again."),
    list.length === 0
      ? h("p", { class: "muted" }, "No secrets.")
      : h(
          "ul",
          { class: "keys" },
          list.map((name) => {
            const remove = h("button", { type: "button", "aria-label": `Delete secret ${name}` }, "Delete")
            remove.addEventListener("click", async () => {
              try {
                await api("DELETE", `/api/pipelines/${enc(pipeline.name)}/secrets/${enc(name)}`)
                location.reload()
              } catch (error) {
                remove.after(problem(error))
              }
            })
            return h("li", {}, h("code", {}, name), " ", remove)
          }),
        ),
    form,
  )
}

function rbac(pipeline) {
  const field = h("textarea", { id: "rbac", rows: 2, spellcheck: "false", value: pipeline.rbac_expression ?? "" })
  const form = h(
    "form",
    {},
    h("label", { for: "rbac" }, "Who may see and run this pipeline (a CEL expression; empty: everyone signed in)"),
    field,
    h("button", { type: "submit" }, "Save expression"),
  )
  form.addEventListener("submit", async (event) => {
    event.preventDefault()
    form.querySelector(".problem, .saved")?.remove()
    try {
      await api("PUT", `/api/pipelines/${enc(pipeline.name)}`, {
        ...rewrite(pipeline, {}),
        rbac_expression: field.value,
      })
      pipeline.rbac_expression = field.value
      form.append(h("p", { class: "saved", role: "status" }, "Saved."))
    } catch (error) {
      form.append(problem(error))
    }
  })
  return h("section", { "aria-labelledby": "rbac-title" }, h("h2", { id: "rbac-title" }, "Access"), form)
}
