import { h } from "./dom.js"

// Keyboard shortcuts (docs/ui.md lists them): global ones here, a page's own through onKey().

/** Shortcuts every page has, for the help dialog; a page's own are added by onKey(). */
const shortcuts = [
  ["/", "search (the filter on this page, or the search page)"],
  ["j / k", "next / previous run or pipeline in the list"],
  ["Enter", "open the selected run or pipeline"],
  ["g p", "go to pipelines"],
  ["g s", "go to search"],
  ["?", "show this help"],
  ["Esc", "close a dialog, leave a field"],
]
const pageKeys = new Map()

/** A page's own shortcut: `key` calls `action` when no field has the focus. */
export function onKey(key, description, action) {
  pageKeys.set(key, action)
  shortcuts.push([key, description])
}

/** Moves the selection through the page's rows (`data-row`), focusing the row's first link. */
function moveSelection(step) {
  const rows = [...document.querySelectorAll("[data-row]")].filter((row) => row.offsetParent !== null)
  if (rows.length === 0) return
  const current = rows.findIndex((row) => row.classList.contains("selected"))
  const next =
    current === -1 ? (step > 0 ? 0 : rows.length - 1) : Math.min(rows.length - 1, Math.max(0, current + step))
  rows[current]?.classList.remove("selected")
  const row = rows[next]
  row.classList.add("selected")
  const link = row.querySelector("a")
  ;(link ?? row).focus()
  row.scrollIntoView({ block: "nearest" })
}

function help() {
  let dialog = document.getElementById("shortcuts")
  if (dialog === null) {
    dialog = h(
      "dialog",
      { id: "shortcuts", "aria-labelledby": "shortcuts-title" },
      h("h2", { id: "shortcuts-title" }, "Keyboard shortcuts"),
      h(
        "dl",
        {},
        shortcuts.map(([key, what]) => [h("dt", {}, h("kbd", {}, key)), h("dd", {}, what)]),
      ),
      h("form", { method: "dialog" }, h("button", {}, "Close")),
    )
    document.body.append(dialog)
  }
  dialog.showModal()
}

const typing = (target) =>
  target instanceof HTMLInputElement ||
  target instanceof HTMLTextAreaElement ||
  target instanceof HTMLSelectElement ||
  target?.isContentEditable

/** Listens for the shortcuts; `g` waits a second for its second key. */
export function listenForKeys() {
  let pendingG = 0
  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return
    if (event.key === "Escape" && typing(event.target)) {
      event.target.blur()
      return
    }
    if (typing(event.target) || document.querySelector("dialog[open]")) return
    const now = Date.now()
    if (now - pendingG < 1000) {
      pendingG = 0
      if (event.key === "p") location.assign("/")
      else if (event.key === "s") location.assign("/search")
      return
    }
    const action = pageKeys.get(event.key)
    if (action !== undefined) {
      event.preventDefault()
      action()
      return
    }
    switch (event.key) {
      case "g":
        pendingG = now
        break
      case "/": {
        event.preventDefault()
        const field = document.querySelector("[data-search]")
        if (field !== null) field.focus()
        else location.assign("/search")
        break
      }
      case "j":
        moveSelection(1)
        break
      case "k":
        moveSelection(-1)
        break
      case "?":
        help()
        break
    }
  })
}
