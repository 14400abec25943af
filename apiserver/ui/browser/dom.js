// Small helpers every page uses: building elements, times, statuses and empty states.

/**
 * An element: `h("a", { href: "/" }, "text", child)`. Attributes starting with `on` are listeners;
 * `class`, `for`, aria-* and data-* are set as attributes; text is always text, never HTML.
 */
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag)
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value)
    else if (name === "value" || name === "checked") element[name] = value
    else element.setAttribute(name, value === true ? "" : String(value))
  }
  append(element, children)
  return element
}

function append(element, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue
    if (Array.isArray(child)) append(element, child)
    else element.append(child instanceof Node ? child : String(child))
  }
}

/** Replaces an element's children (arrays flattened; null, undefined and false left out). */
export function fill(element, ...children) {
  element.replaceChildren()
  append(element, children)
  return element
}

/** Replaces the page's content and its title. */
export function render(title, ...children) {
  document.title = `${title} · runnel`
  return fill(document.getElementById("main"), children)
}

const units = [
  ["year", 365 * 24 * 3600],
  ["month", 30 * 24 * 3600],
  ["day", 24 * 3600],
  ["hour", 3600],
  ["minute", 60],
  ["second", 1],
]
const relative = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" })

/** "3 minutes ago" for an ISO time. */
export function ago(iso) {
  const seconds = (Date.parse(iso) - Date.now()) / 1000
  for (const [unit, size] of units) {
    if (Math.abs(seconds) >= size || unit === "second") return relative.format(Math.round(seconds / size), unit)
  }
  return ""
}

/** A relative time with the exact time on hover; kept up to date by tickTimes(). */
export function time(iso) {
  if (!iso) return h("span", { class: "muted" }, "—")
  return h("time", { datetime: iso, title: new Date(iso).toLocaleString(), "data-relative": "" }, ago(iso))
}

/** Refreshes every relative time on the page twice a minute. */
export function tickTimes() {
  setInterval(() => {
    for (const element of document.querySelectorAll("time[data-relative]")) {
      element.textContent = ago(element.getAttribute("datetime"))
    }
  }, 30_000)
}

/** "1m 05s" between two ISO times, or up to now while `to` is null. */
export function duration(from, to) {
  if (!from) return "—"
  const ms = Math.max(0, (to ? Date.parse(to) : Date.now()) - Date.parse(from))
  const seconds = Math.floor(ms / 1000)
  if (seconds < 60) return `${(ms / 1000).toFixed(1)}s`
  const minutes = Math.floor(seconds / 60)
  if (minutes < 60) return `${minutes}m ${String(seconds % 60).padStart(2, "0")}s`
  return `${Math.floor(minutes / 60)}h ${String(minutes % 60).padStart(2, "0")}m`
}

/** A status as a word with a colour and a shape, so colour is never the only signal. */
export function badge(status) {
  return h("span", { class: `badge s-${status}` }, status)
}

/** A useful empty state: what is missing and the one thing to do about it. */
export function empty(message, command) {
  return h("div", { class: "empty" }, h("p", {}, message), command ? h("pre", {}, h("code", {}, command)) : null)
}

/** An error where the user acted, read out by screen readers. */
export function problem(error) {
  return h("p", { class: "problem", role: "alert" }, error instanceof Error ? error.message : String(error))
}

/** Copies text, saying so on the button that did it. */
export async function copy(button, text) {
  const label = button.textContent
  try {
    await navigator.clipboard.writeText(text)
    button.textContent = "Copied"
  } catch {
    button.textContent = "Copy failed: select and copy"
  }
  setTimeout(() => {
    button.textContent = label
  }, 1500)
}
