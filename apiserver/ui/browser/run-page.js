import { api, enc, get } from "./api.js"
import { badge, duration, empty, fill, h, problem, render, time } from "./dom.js"
import { onKey } from "./keys.js"
import { LogModel, LogView } from "./log-view.js"
import { trigger } from "./trigger.js"

// One run: its status and inputs, its tasks on a timeline, its gates, and its log, replayed then followed
// over GET /api/runs/:id/events (the stream `runnel run logs -f` reads). The status and tasks are read
// again from the REST API while the run goes on; nothing about the run is worked out here.

const final = new Set(["success", "failure", "error", "aborted"])
const refreshMs = 2000

export async function runPage(id) {
  const query = new URLSearchParams(location.search)
  const state = { run: undefined, tasks: [], gates: [] }
  let features = []

  const head = h("div", { class: "page-head" }, h("h1", {}, `Run ${id}`))
  const facts = h("dl", { class: "facts" })
  const taskList = h("section", { "aria-labelledby": "tasks-title" })
  const gateList = h("section", { "aria-labelledby": "gates-title", hidden: true })
  const model = new LogModel()
  const followButton = h("button", { type: "button", "aria-pressed": "true" }, "Follow")
  const timesButton = h("button", { type: "button", "aria-pressed": "false" }, "Timestamps")
  const taskSelect = h("select", { id: "task-filter" }, h("option", { value: "" }, "All tasks"))
  const lineCount = h("span", { class: "muted", "aria-live": "polite" }, "")
  const streamState = h("p", { class: "muted", role: "status" }, "Connecting to the log…")
  const view = new LogView(model, {
    label: `output of run ${id}`,
    onFollowChange: (on) => followButton.setAttribute("aria-pressed", String(on)),
    onSelect: (n) => history.replaceState(null, "", `${location.pathname}${location.search}#L${n}`),
  })
  const download = h("a", { href: "#", download: `${id}.log` }, "Download raw")
  download.addEventListener("click", () => {
    const url = URL.createObjectURL(new Blob([view.text()], { type: "text/plain" }))
    download.href = url
    setTimeout(() => URL.revokeObjectURL(url), 10_000)
  })

  const toggleFollow = () => view.setFollowing(!view.following)
  const toggleTimes = () => {
    view.setTimestamps(!view.timestamps)
    timesButton.setAttribute("aria-pressed", String(view.timestamps))
  }
  followButton.addEventListener("click", toggleFollow)
  timesButton.addEventListener("click", toggleTimes)
  onKey("f", "follow the log, or stop following it", toggleFollow)
  onKey("t", "show or hide timestamps in the log", toggleTimes)
  onKey("G", "jump to the end of the log and follow it", () => view.setFollowing(true))

  const showTask = (path) => {
    const next = new URLSearchParams(location.search)
    if (path === "") next.delete("task")
    else next.set("task", path)
    next.delete("find")
    history.replaceState(null, "", `${location.pathname}${next.size > 0 ? `?${next}` : ""}`)
    taskSelect.value = path
    view.setFilter(path === "" ? -1 : model.taskIndex(path))
  }
  taskSelect.addEventListener("change", () => showTask(taskSelect.value))

  const draw = () => {
    drawHead(head, state.run)
    drawFacts(facts, state.run)
    drawTasks(taskList, state.run, state.tasks, showTask)
    drawGates(gateList, state.gates, refresh)
    for (const task of state.tasks) addTaskOption(taskSelect, task.path)
  }
  const refresh = async () => {
    const [fresh, tasks, gates] = await Promise.all([
      get(`/api/runs/${enc(id)}`),
      get(`/api/runs/${enc(id)}/tasks?output=false`),
      features.includes("gates") ? get(`/api/runs/${enc(id)}/gates`) : [],
    ])
    Object.assign(state, { run: fresh, tasks, gates })
    draw()
  }

  render(
    `Run ${id}`,
    head,
    facts,
    gateList,
    taskList,
    h(
      "section",
      { "aria-labelledby": "log-title", class: "log-section" },
      h("h2", { id: "log-title" }, "Log"),
      h(
        "div",
        { class: "toolbar" },
        h("label", { for: "task-filter" }, "Show "),
        taskSelect,
        followButton,
        timesButton,
        download,
        lineCount,
      ),
      streamState,
      view.element,
    ),
  )
  // Where to land: a line (#L123), or the first line with the words a search found (?find=), in ?task=.
  const wantedTask = query.get("task") ?? ""
  if (wantedTask !== "") showTask(wantedTask)
  let wantedLine = /^#L(\d+)$/.exec(location.hash)?.[1]
  let needle = query.get("find") ?? ""
  if (wantedLine !== undefined || needle !== "") view.setFollowing(false)
  const land = () => {
    if (wantedLine !== undefined && view.select(Number(wantedLine))) wantedLine = undefined
    if (needle !== "") {
      const n = view.find(needle)
      if (n > 0) {
        view.select(n)
        needle = ""
      }
    }
  }

  const source = new EventSource(`/api/runs/${enc(id)}/events`)
  let landing = 0
  source.onmessage = (message) => {
    const event = JSON.parse(message.data)
    const from = model.lines.length
    if (event.stream !== undefined) {
      const path = event.path ?? "pipeline/console"
      addTaskOption(taskSelect, path)
      model.add(path, event.stream, event.data, Date.now())
    } else if (event.event === "error") {
      streamState.after(problem(event.message))
    } else if (event.event === "exit") {
      source.close()
      model.flush(Date.now())
      streamState.textContent = `The run ended with exit code ${event.code}.`
      refresh().then(land, () => {})
    }
    if (streamState.textContent.startsWith("Connecting")) streamState.textContent = "Following the log live."
    if (model.lines.length > from) {
      view.added(from)
      lineCount.textContent = `${model.lines.length.toLocaleString()} lines`
      // Looking for the landing line costs a scan: at most every 250 ms while lines pour in.
      if ((wantedLine !== undefined || needle !== "") && Date.now() - landing > 250) {
        landing = Date.now()
        land()
      }
    }
  }
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED)
      streamState.textContent = "The log stream was lost; reload to try again."
    else streamState.textContent = "Reconnecting to the log…"
  }
  view.update()

  // The stream replays while the run's facts are read: the log shows as soon as its first lines arrive.
  try {
    ;({ features } = await get("/api/features"))
    await refresh()
  } catch (error) {
    source.close()
    throw error
  }
  const timers = setInterval(() => {
    const element = document.getElementById("run-duration")
    if (element !== null) element.textContent = duration(state.run.started_at, state.run.finished_at)
    if (final.has(state.run.status)) clearInterval(timers)
  }, 1000)
  const poll = setInterval(() => {
    if (final.has(state.run.status)) clearInterval(poll)
    else refresh().catch(() => {})
  }, refreshMs)
}

function addTaskOption(select, path) {
  if ([...select.options].some((option) => option.value === path)) return
  select.append(h("option", { value: path }, path))
}

function drawHead(head, run) {
  const running = !final.has(run.status)
  const stop = h("button", { type: "button", class: "danger" }, "Stop")
  stop.addEventListener("click", async () => {
    stop.disabled = true
    try {
      await api("POST", `/api/runs/${enc(run.id)}/stop`)
      stop.textContent = "Stopping…"
    } catch (error) {
      stop.after(problem(error))
    }
  })
  const again = h("button", { type: "button" }, "Run again")
  again.addEventListener("click", () =>
    trigger(
      run.pipeline_id ?? run.pipeline_name,
      run.args.length > 0 ? { mode: "args", args: run.args } : { mode: "manual" },
      head,
    ),
  )
  fill(
    head,
    h("h1", {}, `Run ${run.id}`),
    h("span", { id: "run-status" }, badge(run.status)),
    h(
      "div",
      { class: "actions" },
      running ? stop : null,
      // A webhook's request is not kept to send again; a manual or args run is repeated as it was.
      run.trigger_type === "webhook" ? null : again,
    ),
  )
}

function drawFacts(facts, run) {
  fill(
    facts,
    h("dt", {}, "Pipeline"),
    h("dd", {}, h("a", { href: `/pipelines/${enc(run.pipeline_name)}` }, run.pipeline_name)),
    h("dt", {}, "Trigger"),
    h("dd", {}, run.triggered_by ? `${run.trigger_type} by ${run.triggered_by}` : run.trigger_type),
    h("dt", {}, "Arguments"),
    h("dd", {}, run.args.length === 0 ? h("span", { class: "muted" }, "none") : h("code", {}, run.args.join(" "))),
    h("dt", {}, "Started"),
    h("dd", {}, time(run.started_at ?? run.created_at)),
    h("dt", {}, "Duration"),
    h("dd", { id: "run-duration" }, duration(run.started_at, run.finished_at)),
    h("dt", {}, "Exit code"),
    h("dd", {}, run.code === null ? "—" : String(run.code)),
    run.error_message ? [h("dt", {}, "Error"), h("dd", { class: "problem" }, run.error_message)] : null,
  )
}

/** Tasks in start order, each a bar on the run's timeline (parallel tasks overlap); YAML ones under their job. */
function drawTasks(section, run, tasks, showTask) {
  const title = h("h2", { id: "tasks-title" }, "Tasks")
  if (tasks.length === 0) {
    fill(section, title, empty(final.has(run.status) ? "This run ran no tasks." : "No task has started yet."))
    return
  }
  const starts = tasks.map((t) => Date.parse(t.started_at ?? "")).filter(Number.isFinite)
  const begin = Math.min(...starts, Date.parse(run.started_at ?? run.created_at))
  const end = Math.max(begin + 1, ...tasks.map((t) => Date.parse(t.ended_at ?? "") || Date.now()))
  const row = (task) => {
    const from = Date.parse(task.started_at ?? "")
    const to = Date.parse(task.ended_at ?? "") || Date.now()
    const left = Number.isFinite(from) ? ((from - begin) / (end - begin)) * 100 : 0
    const width = Number.isFinite(from) ? Math.max(0.5, ((to - from) / (end - begin)) * 100) : 0
    const link = h(
      "a",
      { href: `?task=${enc(task.path)}`, title: task.path },
      task.path.slice(task.path.lastIndexOf("/") + 1),
    )
    link.addEventListener("click", (event) => {
      event.preventDefault()
      showTask(task.path)
      document.getElementById("log-title")?.scrollIntoView({ block: "start" })
    })
    return h(
      "li",
      { "data-row": "", class: "task-row" },
      link,
      badge(task.status),
      h("span", { class: "muted" }, task.code === null ? "" : `exit ${task.code}`),
      h("span", {}, duration(task.started_at, task.ended_at)),
      h(
        "span",
        { class: "bar-track", "aria-hidden": "true" },
        h("span", { class: `bar s-${task.status}`, style: `left:${left}%;width:${width}%` }),
      ),
    )
  }
  const jobs = new Map()
  for (const task of tasks) {
    const job = task.path.startsWith("jobs/") ? task.path.split("/")[1] : ""
    if (!jobs.has(job)) jobs.set(job, [])
    jobs.get(job).push(task)
  }
  fill(
    section,
    title,
    [...jobs].map(([job, list]) =>
      job === ""
        ? h("ol", { class: "tasks" }, list.map(row))
        : h("div", { class: "job" }, h("h3", {}, `job ${job}`), h("ol", { class: "tasks" }, list.map(row))),
    ),
  )
}

function drawGates(section, gates, refresh) {
  const pending = gates.filter((gate) => gate.status === "pending")
  section.hidden = gates.length === 0
  if (gates.length === 0) return
  fill(
    section,
    h("h2", { id: "gates-title" }, "Approval gates"),
    h(
      "ul",
      { class: "gates" },
      gates.map((gate) => {
        const decide = (action) => async (event) => {
          try {
            await api("POST", `/api/gates/${enc(gate.id)}/${action}`)
            await refresh()
          } catch (error) {
            event.target.after(problem(error))
          }
        }
        return h(
          "li",
          {},
          h("strong", {}, gate.name),
          " ",
          badge(gate.status),
          gate.message ? h("span", {}, ` ${gate.message}`) : null,
          gate.status === "pending"
            ? [
                h("button", { type: "button", class: "primary", onclick: decide("approve") }, "Approve"),
                h("button", { type: "button", class: "danger", onclick: decide("reject") }, "Reject"),
              ]
            : h("span", { class: "muted" }, gate.resolved_by ? ` by ${gate.resolved_by}` : ""),
        )
      }),
    ),
    pending.length === 0 ? null : h("p", { class: "muted" }, "The run waits until a pending gate is approved."),
  )
}
