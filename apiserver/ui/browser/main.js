import { ApiError, get } from "./api.js"
import { h, problem, render, tickTimes } from "./dom.js"
import { listenForKeys } from "./keys.js"
import { pipelinePage } from "./pipeline-page.js"
import { pipelinesPage } from "./pipelines-page.js"
import { runPage } from "./run-page.js"
import { searchPage } from "./search-page.js"

// The UI's entry: one page per path, each a full page load (the assets are cached by hash, so a page
// costs its small HTML and its API calls).

const routes = [
  [/^\/$/, () => pipelinesPage()],
  [/^\/pipelines\/([^/]+)$/, (name) => pipelinePage(decodeURIComponent(name))],
  [/^\/runs\/([^/]+)$/, (id) => runPage(decodeURIComponent(id))],
  [/^\/search$/, () => searchPage()],
]

async function start() {
  listenForKeys()
  tickTimes()
  const { pathname } = location
  const section =
    pathname === "/" || pathname.startsWith("/pipelines/") ? "pipelines" : pathname === "/search" ? "search" : ""
  document.querySelector(`[data-nav="${section}"]`)?.setAttribute("aria-current", "page")
  showUser()
  for (const [pattern, page] of routes) {
    const match = pattern.exec(location.pathname)
    if (match === null) continue
    try {
      await page(...match.slice(1))
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) return // on the way to the login page
      render("Error", problem(error))
    }
    return
  }
  render("Not found", problem(`runnel has no page at ${location.pathname}`))
}

/** Who is logged in, and the way out, when the server has a login (GET /api/me says authenticated). */
async function showUser() {
  const me = await get("/api/me").catch(() => undefined)
  if (me?.authenticated !== true) return
  document
    .querySelector(".top .hint")
    ?.before(
      h(
        "span",
        { class: "user" },
        "Signed in as ",
        h("strong", { title: me.actor }, me.Name || me.NickName || me.actor),
        " ",
        h("a", { href: "/auth/logout" }, "Log out"),
      ),
    )
}

start()
