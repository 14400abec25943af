import { createHash } from "node:crypto"
import { readFile } from "node:fs/promises"
import { fileURLToPath } from "node:url"
import Router from "@koa/router"
import type { Context } from "koa"
import { withoutUser } from "../route-access.ts"

/**
 * The web UI (docs/ui.md): one HTML page for every UI path, which loads one
 * script and one style sheet named by their content hash. The browser code
 * (./browser/) is bundled with esbuild on the first request and kept in
 * memory, so `npm start` serves it without a build step; it only calls the
 * REST API, the event stream and MCP's search, as any other client does.
 */
export function uiRoutes(): Router {
  const router = new Router()
  let assets: Promise<Assets> | undefined
  const built = () => {
    assets ??= buildAssets().catch((error: unknown) => {
      assets = undefined // a failed build (a file being edited) is tried again on the next request
      throw error
    })
    return assets
  }

  const page = async (ctx: Context) => {
    const { html, htmlTag } = await built()
    // The page is small and names its assets by hash: revalidated every time, so a new server's UI shows at once.
    ctx.set("Cache-Control", "no-cache")
    ctx.set("ETag", htmlTag)
    ctx.set("X-Content-Type-Options", "nosniff")
    if (ctx.get("If-None-Match") === htmlTag) {
      ctx.status = 304
      return
    }
    ctx.type = "text/html; charset=utf-8"
    ctx.body = html
  }
  // The page and its assets hold no data; what the page shows comes from API calls, each checked.
  const noData = withoutUser("page")
  for (const path of ["/", "/pipelines/:name", "/runs/:id", "/search"]) router.get(path, noData, page)

  router.get("/assets/:file", noData, async (ctx) => {
    const asset = (await built()).files.get(ctx.params.file ?? "")
    if (asset === undefined) {
      ctx.status = 404
      ctx.type = "text/plain; charset=utf-8"
      ctx.body = `no asset ${ctx.params.file}; reload the page, the server may have been updated`
      return
    }
    // Named by content: a name never changes meaning, so the browser keeps it for a year without asking.
    ctx.set("Cache-Control", "public, max-age=31536000, immutable")
    ctx.set("X-Content-Type-Options", "nosniff")
    ctx.type = asset.type
    ctx.body = asset.body
  })
  return router
}

type Asset = { readonly type: string; readonly body: string }
type Assets = { readonly html: string; readonly htmlTag: string; readonly files: ReadonlyMap<string, Asset> }

const entry = new URL("./browser/main.js", import.meta.url)
const styles = new URL("./browser/styles.css", import.meta.url)

const hashOf = (text: string) => createHash("sha256").update(text).digest("hex").slice(0, 16)

async function buildAssets(): Promise<Assets> {
  // Loaded here, on the first page, so that a server nobody opens in a browser never loads the bundler for it.
  const { build } = await import("esbuild")
  const result = await build({
    entryPoints: [fileURLToPath(entry)],
    bundle: true,
    format: "esm",
    minify: true,
    target: "es2022",
    write: false,
    logLevel: "silent",
  })
  const script = result.outputFiles[0]?.text ?? ""
  const css = await readFile(styles, "utf8")
  const scriptName = `app.${hashOf(script)}.js`
  const cssName = `app.${hashOf(css)}.css`
  const html = shell(`/assets/${scriptName}`, `/assets/${cssName}`)
  return {
    html,
    htmlTag: `"${hashOf(html)}"`,
    files: new Map([
      [scriptName, { type: "text/javascript; charset=utf-8", body: script }],
      [cssName, { type: "text/css; charset=utf-8", body: css }],
    ]),
  }
}

/** The page every UI path answers: the header paints at once, the script fills `main`. */
function shell(script: string, css: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>runnel</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="${css}">
<script type="module" src="${script}"></script>
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
<header class="top">
<a class="brand" href="/">runnel</a>
<nav aria-label="Main"><a href="/" data-nav="pipelines">Pipelines</a><a href="/search" data-nav="search">Search</a></nav>
<span class="hint">Press <kbd>?</kbd> for shortcuts</span>
</header>
<main id="main" tabindex="-1"><p class="loading">Loading…</p></main>
<noscript><p>runnel's web UI needs JavaScript; the same views are in the terminal: runnel pipeline ls, runnel run ls.</p></noscript>
</body>
</html>
`
}
