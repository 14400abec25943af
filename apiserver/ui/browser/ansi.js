// ANSI colours of task output as spans: SGR codes (colours, bold, dim, italic, underline, 256 colours and
// RGB) become classes and styles; other escape sequences are dropped. A line is drawn only when it is on
// screen, so this runs on a few dozen lines at a time. Each line starts from the default style: tools
// that colour output reset at each line's end, and carrying state would need every earlier line read.

// biome-ignore lint/suspicious/noControlCharactersInRegex: ESC is what starts the sequences this reads.
const sequence = /\x1b\[([0-9;?]*)([A-Za-z])/g

function colour256(n) {
  if (n < 16) return undefined
  if (n >= 232) {
    const grey = 8 + (n - 232) * 10
    return `rgb(${grey},${grey},${grey})`
  }
  const i = n - 16
  const level = (v) => (v === 0 ? 0 : 55 + v * 40)
  return `rgb(${level(Math.floor(i / 36))},${level(Math.floor(i / 6) % 6)},${level(i % 6)})`
}

function apply(style, codes) {
  const numbers = codes === "" ? [0] : codes.split(";").map((c) => Number(c) || 0)
  for (let i = 0; i < numbers.length; i++) {
    const n = numbers[i]
    if (n === 0)
      Object.assign(style, { fg: undefined, bg: undefined, bold: false, dim: false, italic: false, underline: false })
    else if (n === 1) style.bold = true
    else if (n === 2) style.dim = true
    else if (n === 3) style.italic = true
    else if (n === 4) style.underline = true
    else if (n === 22) style.bold = style.dim = false
    else if (n === 23) style.italic = false
    else if (n === 24) style.underline = false
    else if ((n >= 30 && n <= 37) || (n >= 90 && n <= 97)) style.fg = `c${n}`
    else if (n === 39) style.fg = undefined
    else if ((n >= 40 && n <= 47) || (n >= 100 && n <= 107)) style.bg = `c${n}`
    else if (n === 49) style.bg = undefined
    else if (n === 38 || n === 48) {
      const key = n === 38 ? "fg" : "bg"
      if (numbers[i + 1] === 5) {
        const index = numbers[i + 2]
        style[key] =
          index < 8
            ? `c${(n === 38 ? 30 : 40) + index}`
            : index < 16
              ? `c${(n === 38 ? 90 : 100) + index - 8}`
              : colour256(index)
        i += 2
      } else if (numbers[i + 1] === 2) {
        style[key] = `rgb(${numbers[i + 2]},${numbers[i + 3]},${numbers[i + 4]})`
        i += 4
      }
    }
  }
}

function span(text, style) {
  const classes = []
  let css = ""
  for (const key of ["fg", "bg"]) {
    const value = style[key]
    if (value === undefined) continue
    if (value.startsWith("c")) classes.push(`a-${value}`)
    else css += `${key === "fg" ? "color" : "background-color"}:${value};`
  }
  if (style.bold) classes.push("a-bold")
  if (style.dim) classes.push("a-dim")
  if (style.italic) classes.push("a-italic")
  if (style.underline) classes.push("a-underline")
  if (classes.length === 0 && css === "") return document.createTextNode(text)
  const element = document.createElement("span")
  if (classes.length > 0) element.className = classes.join(" ")
  if (css !== "") element.style.cssText = css
  element.textContent = text
  return element
}

/** The nodes of one line; a carriage return keeps what follows it, as a terminal's redrawn progress line shows. */
export function ansiNodes(line) {
  const text = line.includes("\r") ? line.slice(line.lastIndexOf("\r", line.length - 2) + 1).replace(/\r$/, "") : line
  if (!text.includes("\x1b")) return [document.createTextNode(text)]
  const nodes = []
  const style = {}
  let at = 0
  for (const match of text.matchAll(sequence)) {
    if (match.index > at) nodes.push(span(text.slice(at, match.index), style))
    if (match[2] === "m") apply(style, match[1])
    at = match.index + match[0].length
  }
  if (at < text.length) nodes.push(span(text.slice(at), style))
  return nodes
}

/** The text of a line without escape sequences, for searching and downloads. */
export const plain = (line) => line.replace(sequence, "")
