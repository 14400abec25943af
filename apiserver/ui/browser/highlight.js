import { h } from "./dom.js"

// Syntax highlighting of a pipeline's source, TypeScript/JavaScript or YAML: a few token kinds by
// regular expression, enough to read a pipeline by, never executed or parsed further.

const script =
  /(\/\/[^\n]*|\/\*[\s\S]*?\*\/)|("(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|`(?:\\.|[^`\\])*`)|\b(const|let|var|function|async|await|return|if|else|for|while|of|in|new|throw|try|catch|finally|import|export|from|default|class|extends|typeof|true|false|null|undefined)\b|(\b\d+(?:\.\d+)?\b)/g
const yaml =
  /(#[^\n]*)|("(?:\\.|[^"\\\n])*"|'(?:[^'\n])*')|^(\s*(?:- )?[\w.-]+:)(?=\s|$)|\b(true|false|null|\d+(?:\.\d+)?)\b/gm
const kinds = ["comment", "string", "keyword", "number"]

/** The source as a <pre> of numbered lines (the numbers are drawn by CSS, so copying takes only the code). */
export function highlighted(text, contentType) {
  const pattern = contentType === "yaml" ? yaml : script
  const lines = [[]]
  const push = (piece, kind) => {
    const parts = piece.split("\n")
    parts.forEach((part, index) => {
      if (index > 0) lines.push([])
      if (part !== "") lines.at(-1).push(kind === undefined ? part : h("span", { class: `t-${kind}` }, part))
    })
  }
  let at = 0
  for (const match of text.matchAll(pattern)) {
    if (match[0] === "") continue
    push(text.slice(at, match.index))
    const group = match.slice(1).findIndex((value) => value !== undefined)
    push(match[0], kinds[group])
    at = match.index + match[0].length
  }
  push(text.slice(at))
  if (lines.length > 1 && lines.at(-1).length === 0) lines.pop()
  return h(
    "pre",
    { class: "source", tabindex: "0", "aria-label": "pipeline source" },
    h(
      "code",
      {},
      lines.map((parts) => h("span", { class: "line" }, parts.length === 0 ? "\n" : [...parts, "\n"])),
    ),
  )
}
