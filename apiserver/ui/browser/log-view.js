import { ansiNodes, plain } from "./ansi.js"
import { h } from "./dom.js"

// A run's log: every line kept once (strings, and per-line task, stream and arrival time in typed
// arrays), and a view that draws only the rows on screen, so a log of millions of lines scrolls and
// follows without freezing the tab. Line numbers count lines of the view shown (all tasks, or one).

/** A row's height in pixels: fixed, so a line's position is arithmetic. Must match .log .ln in styles.css. */
const rowHeight = 20
/** Browsers cap an element's height (Chrome near 33.5 million pixels); beyond this the scrollbar is scaled. */
const maxSpacer = 15_000_000
/** Characters of one line drawn; the download has the rest. */
const maxDrawn = 4000

function grow(array, size) {
  if (size <= array.length) return array
  const bigger = new array.constructor(Math.max(size, array.length * 2))
  bigger.set(array)
  return bigger
}

/** The lines of a run's output as they arrive, split per task and stream. */
export class LogModel {
  lines = []
  task = new Uint16Array(4096)
  stderr = new Uint8Array(4096)
  at = new Float64Array(4096)
  /** Task paths by index. */
  paths = []
  #index = new Map()
  #pending = new Map()

  taskIndex(path) {
    let index = this.#index.get(path)
    if (index === undefined) {
      index = this.paths.length
      this.paths.push(path)
      this.#index.set(path, index)
    }
    return index
  }

  /** Adds a chunk of one task's stream; a partial last line waits for the rest. Answers how many lines it completed. */
  add(path, stream, text, now) {
    const key = `${stream} ${path}`
    const joined = (this.#pending.get(key) ?? "") + text
    const parts = joined.split("\n")
    this.#pending.set(key, parts.pop())
    for (const line of parts) this.#push(this.taskIndex(path), stream === "stderr", line, now)
    return parts.length
  }

  /** Ends every partial line (the run ended). */
  flush(now) {
    let added = 0
    for (const [key, rest] of this.#pending) {
      if (rest === "") continue
      const space = key.indexOf(" ")
      this.#push(this.taskIndex(key.slice(space + 1)), key.slice(0, space) === "stderr", rest, now)
      added++
    }
    this.#pending.clear()
    return added
  }

  #push(task, stderr, line, now) {
    const n = this.lines.length
    if (n >= this.task.length) {
      this.task = grow(this.task, n + 1)
      this.stderr = grow(this.stderr, n + 1)
      this.at = grow(this.at, n + 1)
    }
    this.lines.push(line)
    this.task[n] = task
    this.stderr[n] = stderr ? 1 : 0
    this.at[n] = now
  }
}

const clock = new Intl.DateTimeFormat(undefined, {
  hourCycle: "h23",
  hour: "2-digit",
  minute: "2-digit",
  second: "2-digit",
  fractionalSecondDigits: 3,
})

/**
 * The scrolling view of a LogModel. `filter` is a task index or -1 for all tasks. While following, new
 * lines keep it at the bottom; scrolling up stops following, scrolling back to the bottom resumes it.
 */
export class LogView {
  following = true
  timestamps = false
  filter = -1
  /** Line indexes of the filtered view (null: every line). */
  #rows = null
  #rowCount = 0
  #selected = -1
  #scheduled = false
  #programmatic = false

  constructor(model, { label, onFollowChange, onSelect }) {
    this.model = model
    this.onFollowChange = onFollowChange
    this.onSelect = onSelect
    this.lines = h("div", { class: "log-lines" })
    this.spacer = h("div", { class: "log-spacer" }, this.lines)
    this.element = h(
      "div",
      { class: "log", role: "log", "aria-live": "off", "aria-label": label, tabindex: "0" },
      this.spacer,
    )
    this.element.addEventListener("scroll", () => this.#scrolled())
    // Scrolling up is the user leaving the bottom, even while new lines keep moving it.
    this.element.addEventListener("wheel", (event) => {
      if (event.deltaY < 0) this.setFollowing(false)
    })
    this.element.addEventListener("keydown", (event) => {
      if (["ArrowUp", "PageUp", "Home"].includes(event.key)) this.setFollowing(false)
    })
    this.element.addEventListener("click", (event) => {
      const link = event.target.closest("a.num")
      if (link === null) return
      event.preventDefault()
      this.select(Number(link.dataset.n))
    })
  }

  /** Lines in the current view. */
  get count() {
    return this.#rows === null ? this.model.lines.length : this.#rowCount
  }

  /** Shows one task (its index) or all (-1). */
  setFilter(task) {
    this.filter = task
    this.#selected = -1
    if (task === -1) {
      this.#rows = null
    } else {
      const { task: tasks, lines } = this.model
      let rows = new Uint32Array(1024)
      let count = 0
      for (let i = 0; i < lines.length; i++) {
        if (tasks[i] !== task) continue
        if (count >= rows.length) rows = grow(rows, count + 1)
        rows[count++] = i
      }
      this.#rows = rows
      this.#rowCount = count
    }
    this.update()
  }

  /** The model got lines from `from` on: the view takes those of its task, and redraws soon. */
  added(from) {
    if (this.#rows !== null) {
      const { task } = this.model
      for (let i = from; i < this.model.lines.length; i++) {
        if (task[i] !== this.filter) continue
        if (this.#rowCount >= this.#rows.length) this.#rows = grow(this.#rows, this.#rowCount + 1)
        this.#rows[this.#rowCount++] = i
      }
    }
    this.update()
  }

  /** The model line of view line `n` (from 1). */
  lineAt(n) {
    return this.#rows === null ? n - 1 : this.#rows[n - 1]
  }

  /** The first view line (from 1) whose text contains `needle` (case-insensitive), or 0. */
  find(needle) {
    const wanted = needle.toLowerCase()
    for (let n = 1; n <= this.count; n++) {
      if (plain(this.model.lines[this.lineAt(n)]).toLowerCase().includes(wanted)) return n
    }
    return 0
  }

  /** Selects view line `n`: marks it, puts it in the URL (#L<n>) and scrolls to it; following stops. */
  select(n) {
    if (n < 1 || n > this.count) return false
    this.#selected = n
    this.onSelect?.(n)
    this.setFollowing(false)
    const top = this.#offsetOf(n - 1) - this.element.clientHeight / 3
    this.#scrollTo(Math.max(0, top))
    this.update()
    return true
  }

  setFollowing(on) {
    if (this.following === on) return
    this.following = on
    this.onFollowChange?.(on)
    if (on) this.update()
  }

  setTimestamps(on) {
    this.timestamps = on
    this.element.classList.toggle("with-times", on)
    this.update()
  }

  /** The text of the view, for the raw download. */
  text() {
    const out = []
    for (let n = 1; n <= this.count; n++) out.push(this.model.lines[this.lineAt(n)])
    return `${out.join("\n")}\n`
  }

  /** Redraws on the next frame, once however many updates come before it. */
  update() {
    if (this.#scheduled) return
    this.#scheduled = true
    requestAnimationFrame(() => {
      this.#scheduled = false
      this.#draw()
    })
  }

  #spacerHeight() {
    return Math.min(this.count * rowHeight, maxSpacer)
  }

  /** The scroll position that shows line index `i` at the top. */
  #offsetOf(i) {
    const full = this.count * rowHeight
    if (full <= maxSpacer) return i * rowHeight
    const range = maxSpacer - this.element.clientHeight
    return (i / Math.max(1, this.count - this.#visible())) * range
  }

  #visible() {
    return Math.ceil(this.element.clientHeight / rowHeight) + 1
  }

  #scrollTo(top) {
    const before = this.element.scrollTop
    this.element.scrollTop = top
    // Only a position that changed fires a scroll event to be told apart from the user's.
    this.#programmatic = this.element.scrollTop !== before
  }

  #scrolled() {
    if (this.#programmatic) {
      this.#programmatic = false
    } else {
      const atBottom = this.element.scrollTop + this.element.clientHeight >= this.element.scrollHeight - rowHeight
      this.setFollowing(atBottom)
    }
    this.update()
  }

  #draw() {
    const count = this.count
    const height = this.#spacerHeight()
    this.spacer.style.height = `${height}px`
    if (this.following) this.#scrollTo(Math.max(0, height - this.element.clientHeight))
    const visible = this.#visible()
    const top = this.element.scrollTop
    const scaled = count * rowHeight > maxSpacer
    const first = scaled
      ? Math.round((top / Math.max(1, maxSpacer - this.element.clientHeight)) * Math.max(0, count - visible))
      : Math.floor(top / rowHeight)
    const last = Math.min(count, first + visible)
    this.lines.style.transform = `translateY(${scaled ? top : first * rowHeight}px)`
    const rows = []
    const { model } = this
    const labelled = this.filter === -1 && model.paths.length > 1
    for (let n = first + 1; n <= last; n++) {
      const i = this.lineAt(n)
      const line = model.lines[i]
      const text = h("span", { class: "txt" }, ansiNodes(line.length > maxDrawn ? `${line.slice(0, maxDrawn)}…` : line))
      const path = model.paths[model.task[i]]
      rows.push(
        h(
          "div",
          { class: `ln${model.stderr[i] ? " err" : ""}${n === this.#selected ? " selected" : ""}`, id: `L${n}` },
          h("a", { class: "num", href: `#L${n}`, "data-n": n, "aria-label": `line ${n}` }, String(n)),
          this.timestamps ? h("span", { class: "ts" }, clock.format(model.at[i])) : null,
          labelled ? h("span", { class: "task", title: path }, path.slice(path.lastIndexOf("/") + 1)) : null,
          text,
        ),
      )
    }
    this.lines.replaceChildren(...rows)
    // The moment the first lines are on screen (drawn in this frame), for `npm run bench` and curious users.
    if (rows.length > 0 && performance.getEntriesByName("runnel:log-visible").length === 0) {
      performance.mark("runnel:log-visible")
    }
  }
}
