import { plain } from "./ansi.js"
import { enc, mcpTool } from "./api.js"
import { empty, h, problem, render } from "./dom.js"

// Full-text search over task output: MCP's search_tasks (the search assistants use), each hit linking to
// its line on the run page (?task= and ?find=, which the run page turns into #L<n>).

export async function searchPage() {
  const query = new URLSearchParams(location.search)
  const words = query.get("q") ?? ""
  const page = Number(query.get("page") ?? "1") || 1
  const field = h("input", { id: "q", name: "q", type: "search", value: words, autocomplete: "off", "data-search": "" })
  const form = h(
    "form",
    { role: "search", action: "/search", class: "inline" },
    h("label", { for: "q" }, "Search task output"),
    field,
    h("button", { type: "submit", class: "primary" }, "Search"),
  )
  const results = h("section", { "aria-label": "Results", "aria-live": "polite" })
  render("Search", h("h1", {}, "Search"), form, results)
  if (words.trim() === "") {
    results.append(
      empty("Type words that occur in task output, for example: connection refused. Every word must occur."),
    )
    field.focus()
    return
  }
  let answer
  try {
    answer = await mcpTool("search_tasks", { query: words, page, per_page: 20 })
  } catch (error) {
    results.append(problem(error))
    return
  }
  if (answer.items.length === 0) {
    results.append(
      empty(
        page === 1
          ? `Nothing found for “${words}”. Output is searchable about a second after it is printed; try fewer words.`
          : "No more results.",
      ),
    )
    return
  }
  const next = new URLSearchParams({ q: words, page: String(page + 1) })
  results.append(
    h("ol", { class: "hits", start: (page - 1) * 20 + 1 }, answer.items.map(hit)),
    answer.has_next ? h("a", { href: `/search?${next}` }, "More results") : null,
  )
}

/** The snippet's words as marks; the line the first mark is on, without them, is what the run page looks for. */
function hit(item) {
  const lines = item.snippet.split("\n")
  const marked = lines.find((line) => line.includes("«")) ?? lines[0] ?? ""
  const needle = plain(marked.replace(/[«»]/g, "").replace(/^…|…$/g, "")).trim()
  const href = `/runs/${enc(item.run_id)}?task=${enc(item.path)}&find=${enc(needle)}`
  return h(
    "li",
    { "data-row": "" },
    h("a", { href }, `${item.pipeline_name} · run ${item.run_id} · ${item.path}`),
    h("span", { class: "muted" }, ` ${item.stream}`),
    h("pre", { class: "snippet" }, marks(plain(item.snippet))),
  )
}

function marks(snippet) {
  return snippet.split(/(«[^»]*»)/).map((part) => (part.startsWith("«") ? h("mark", {}, part.slice(1, -1)) : part))
}
