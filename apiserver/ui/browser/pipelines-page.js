import { enc, get, getAll } from "./api.js"
import { badge, empty, fill, h, render, time } from "./dom.js"
import { triggerMenu } from "./trigger.js"

// Every pipeline the user may see, with its last runs. The list is one request per 100 pipelines; the
// runs of a row are asked for when the row scrolls into view, so 1,000 pipelines cost 10 requests to show.

const stripLength = 10

export async function pipelinesPage() {
  const pipelines = await getAll("/api/pipelines")
  if (pipelines.length === 0) {
    render(
      "Pipelines",
      h("h1", {}, "Pipelines"),
      empty("No pipelines yet. Store the first one from a file:", "runnel pipeline set pipeline.ts"),
    )
    return
  }
  const filter = h("input", {
    id: "filter",
    type: "search",
    placeholder: "Filter by name",
    autocomplete: "off",
    "data-search": "",
  })
  const rows = pipelines.map(row)
  const body = h("tbody", {}, rows)
  const none = h("p", { class: "muted", hidden: true, role: "status" }, "No pipeline name matches the filter.")
  filter.addEventListener("input", () => {
    const words = filter.value.trim().toLowerCase()
    let shown = 0
    for (const tr of rows) {
      const match = tr.dataset.name.includes(words)
      tr.hidden = !match
      if (match) shown++
    }
    none.hidden = shown > 0
  })
  render(
    "Pipelines",
    h(
      "div",
      { class: "page-head" },
      h("h1", {}, "Pipelines"),
      h("span", { class: "muted" }, `${pipelines.length} stored`),
    ),
    h("label", { for: "filter", class: "visually-hidden" }, "Filter pipelines by name"),
    filter,
    h(
      "table",
      { class: "list" },
      h("caption", { class: "visually-hidden" }, "Pipelines with their last runs"),
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          ["Name", "Type", "Driver", "State", "Last run", `Last ${stripLength} runs`, "Actions"].map((name) =>
            h("th", { scope: "col" }, name),
          ),
        ),
      ),
      body,
    ),
    none,
  )
  watchRows(rows, pipelines)
}

function row(pipeline) {
  return h(
    "tr",
    { "data-row": "", "data-name": pipeline.name.toLowerCase(), "data-id": pipeline.id },
    h("td", {}, h("a", { href: `/pipelines/${enc(pipeline.name)}` }, pipeline.name)),
    h("td", {}, pipeline.content_type),
    h("td", {}, pipeline.driver),
    h("td", {}, pipeline.paused ? badge("paused") : h("span", { class: "muted" }, "active")),
    h("td", { class: "last" }, h("span", { class: "muted" }, "…")),
    h("td", { class: "strip" }),
    h("td", {}, triggerMenu(pipeline)),
  )
}

/** Fills a row's runs when it first becomes visible. */
function watchRows(rows, pipelines) {
  const byId = new Map(pipelines.map((p) => [p.id, p]))
  const observer = new IntersectionObserver((entries) => {
    for (const entry of entries) {
      if (!entry.isIntersecting) continue
      observer.unobserve(entry.target)
      fillRuns(entry.target, byId.get(entry.target.dataset.id))
    }
  })
  for (const tr of rows) observer.observe(tr)
}

async function fillRuns(tr, pipeline) {
  const last = tr.querySelector(".last")
  const strip = tr.querySelector(".strip")
  try {
    const { items } = await get(`/api/runs?pipeline_id=${enc(pipeline.id)}&per_page=${stripLength}`)
    if (items.length === 0) {
      fill(last, h("span", { class: "muted" }, "never run"))
      return
    }
    fill(last, h("a", { href: `/runs/${enc(items[0].id)}` }, badge(items[0].status)), " ", time(items[0].created_at))
    fill(
      strip,
      h(
        "ol",
        { class: "runs-strip", "aria-label": `last ${items.length} runs of ${pipeline.name}, oldest first` },
        items
          .slice()
          .reverse()
          .map((run) =>
            h(
              "li",
              {},
              h("a", {
                href: `/runs/${enc(run.id)}`,
                class: `cell s-${run.status}`,
                title: `${run.status}, ${new Date(run.created_at).toLocaleString()}`,
                "aria-label": `run ${run.id}: ${run.status}`,
              }),
            ),
          ),
      ),
    )
  } catch (error) {
    fill(last, h("span", { class: "muted" }, `runs unavailable: ${error.message}`))
  }
}
