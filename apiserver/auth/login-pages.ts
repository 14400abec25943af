/**
 * The few HTML pages of the login (the login page, the device verification
 * page): server-rendered, no script, no external assets. Every text put into
 * them goes through `html`, so a user's name or a code cannot become markup.
 */
export function html(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)
}

/** A whole page; `body` is markup already escaped by its maker. */
export function page(title: string, body: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${html(title)} · runnel</title>
<style>
body { font-family: system-ui, sans-serif; max-width: 32rem; margin: 4rem auto; padding: 0 1rem; color: #1b1f24; }
h1 { font-size: 1.4rem; }
form { margin: 0.75rem 0; }
button { font: inherit; padding: 0.5rem 1rem; min-width: 16rem; cursor: pointer; }
input { font: inherit; padding: 0.4rem; letter-spacing: 0.1em; text-transform: uppercase; }
.code { font-family: ui-monospace, monospace; font-size: 1.6rem; letter-spacing: 0.15em; }
.error { color: #b42318; }
</style>
</head>
<body>
<h1>${html(title)}</h1>
${body}
</body>
</html>
`
}

/**
 * The pages' headers: no framing (the approval button must not be clickjacked,
 * RFC 8628 section 5.4), nothing loaded from anywhere, not cached.
 */
export const pageHeaders = {
  "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'",
  "X-Frame-Options": "DENY",
  "Cache-Control": "no-store",
  // same-origin, not no-referrer: with no-referrer a browser sends `Origin: null`, which the CSRF check refuses.
  "Referrer-Policy": "same-origin",
} as const
