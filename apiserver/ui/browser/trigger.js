import { api, enc } from "./api.js"
import { h, problem } from "./dom.js"

// The trigger menu: run now, run with arguments, simulate a webhook (POST /api/pipelines/:id/trigger,
// the quick trigger of interface.md). A started run opens its page.

/** Provider templates for a simulated webhook: the headers that make runnel detect the provider, and a small body. */
const templates = {
  "GitHub push": {
    headers: { "X-GitHub-Event": "push", "Content-Type": "application/json" },
    body: {
      ref: "refs/heads/main",
      after: "0000000000000000000000000000000000000000",
      repository: { full_name: "org/repo" },
    },
  },
  "GitLab push": {
    headers: { "X-Gitlab-Event": "Push Hook", "Content-Type": "application/json" },
    body: { object_kind: "push", ref: "refs/heads/main", project: { path_with_namespace: "org/repo" } },
  },
  "Bitbucket push": {
    headers: { "X-Event-Key": "repo:push", "Content-Type": "application/json" },
    body: { push: { changes: [{ new: { name: "main" } }] }, repository: { full_name: "org/repo" } },
  },
  Generic: { headers: { "Content-Type": "application/json" }, body: { event: "test" } },
}

/** Starts a run and opens its page; `error` shows a refusal (paused pipeline, full queue) where the user acted. */
export async function trigger(pipelineId, body, near) {
  try {
    const { run_id } = await api("POST", `/api/pipelines/${enc(pipelineId)}/trigger`, body)
    location.assign(`/runs/${enc(run_id)}`)
  } catch (error) {
    near.querySelector(".problem")?.remove()
    near.append(problem(error))
  }
}

/** Arguments as a person types them: whitespace-separated, "double quotes" keep spaces. */
export function parseArgs(text) {
  return [...text.matchAll(/"([^"]*)"|(\S+)/g)].map((match) => match[1] ?? match[2])
}

function dialog(title, fields, submitLabel, onSubmit) {
  const form = h("form", { method: "dialog" })
  const element = h("dialog", { "aria-label": title }, h("h2", {}, title), form)
  form.append(
    ...fields,
    h(
      "div",
      { class: "dialog-actions" },
      h("button", { type: "submit", class: "primary" }, submitLabel),
      h("button", { type: "button", onclick: () => element.close() }, "Cancel"),
    ),
  )
  form.addEventListener("submit", (event) => {
    event.preventDefault()
    onSubmit(form)
  })
  element.addEventListener("close", () => element.remove())
  document.body.append(element)
  element.showModal()
  return element
}

function argsDialog(pipeline) {
  const input = h("input", { id: "trigger-args", name: "args", autocomplete: "off", placeholder: '--fast "two words"' })
  dialog(
    `Run ${pipeline.name} with arguments`,
    [h("label", { for: "trigger-args" }, "Arguments (pipelineContext.args)"), input],
    "Run",
    (form) => trigger(pipeline.id, { mode: "args", args: parseArgs(input.value) }, form),
  )
}

function webhookDialog(pipeline) {
  const select = h(
    "select",
    { id: "webhook-template" },
    Object.keys(templates).map((name) => h("option", { value: name }, name)),
  )
  const method = h("input", { id: "webhook-method", value: "POST", autocomplete: "off" })
  const headers = h("textarea", { id: "webhook-headers", rows: 4, spellcheck: "false" })
  const body = h("textarea", { id: "webhook-body", rows: 8, spellcheck: "false" })
  const fill = () => {
    const template = templates[select.value]
    headers.value = JSON.stringify(template.headers, null, 2)
    body.value = JSON.stringify(template.body, null, 2)
  }
  select.addEventListener("change", fill)
  fill()
  dialog(
    `Simulate a webhook to ${pipeline.name}`,
    [
      h("label", { for: "webhook-template" }, "Provider template"),
      select,
      h("label", { for: "webhook-method" }, "Method"),
      method,
      h("label", { for: "webhook-headers" }, "Headers (JSON object)"),
      headers,
      h("label", { for: "webhook-body" }, "Body"),
      body,
    ],
    "Send",
    (form) => {
      let parsed
      try {
        parsed = JSON.parse(headers.value || "{}")
      } catch (error) {
        form.querySelector(".problem")?.remove()
        form.append(problem(`the headers are not JSON: ${error.message}`))
        return
      }
      trigger(
        pipeline.id,
        { mode: "webhook", webhook: { method: method.value, headers: parsed, body: body.value } },
        form,
      )
    },
  )
}

/** The trigger menu of one pipeline; "Simulate a webhook" only when it has a webhook secret. */
export function triggerMenu(pipeline) {
  const menu = h(
    "details",
    { class: "menu" },
    h("summary", { "aria-label": `Trigger ${pipeline.name}` }, "Trigger"),
    h(
      "div",
      { class: "menu-items" },
      h(
        "button",
        { type: "button", onclick: (event) => trigger(pipeline.id, { mode: "manual" }, event.target.closest(".menu")) },
        "Run now",
      ),
      h("button", { type: "button", onclick: () => argsDialog(pipeline) }, "Run with arguments…"),
      pipeline.has_webhook_secret
        ? h("button", { type: "button", onclick: () => webhookDialog(pipeline) }, "Simulate a webhook…")
        : null,
    ),
  )
  menu.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      menu.open = false
      menu.querySelector("summary").focus()
    }
  })
  return menu
}
