/**
 * The forms a secret value takes when a tool prints it encoded, so that the
 * redactor can mask those too: docker's `auth` field and `curl -v`'s Basic
 * header are base64, URLs carry percent-encoding, `od`/`xxd` show hex, and
 * JSON escapes quotes, backslashes and control characters.
 *
 * Values shorter than minEncodedChars are redacted only as they are: their
 * encodings are so short that masking them would mask ordinary text too.
 */
const minEncodedChars = 8

/** The value and each of its encoded forms that differs from it; no duplicates. */
export function encodedForms(value: string): string[] {
  const forms = new Set([value])
  if (value.length < minEncodedChars) return [...forms]
  const bytes = Buffer.from(value, "utf8")
  for (const form of base64Forms(bytes)) {
    forms.add(form)
    forms.add(form.replaceAll("+", "-").replaceAll("/", "_"))
  }
  const percent = encodeURIComponent(value)
  forms.add(percent)
  // Form encoding (application/x-www-form-urlencoded) writes a space as "+".
  forms.add(percent.replaceAll("%20", "+"))
  // Some encoders write the hex digits of %XX in lower case.
  forms.add(percent.replace(/%[0-9A-F]{2}/g, (byte) => byte.toLowerCase()))
  const hex = bytes.toString("hex")
  forms.add(hex)
  forms.add(hex.toUpperCase())
  const json = JSON.stringify(value).slice(1, -1)
  forms.add(json)
  // Escapers that keep output ASCII (Python's json.dumps) or escape "/" (PHP's json_encode).
  forms.add(json.replace(/[^\x20-\x7e]/g, (char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, "0")}`))
  forms.add(json.replaceAll("/", "\\/"))
  return [...forms].filter((form) => form !== "")
}

/**
 * Base64 of the value wherever it starts inside a longer encoded text: at an
 * offset of 0, 1 or 2 bytes from a 3-byte group. Each form keeps only the
 * characters that depend on the value's bytes alone, so it is found whatever
 * bytes come before and after it.
 */
function base64Forms(bytes: Buffer): string[] {
  const forms: string[] = []
  for (let offset = 0; offset < 3; offset++) {
    const padded = Buffer.concat([Buffer.alloc(offset), bytes]).toString("base64")
    const first = Math.ceil((offset * 8) / 6)
    const end = Math.floor(((offset + bytes.length) * 8) / 6)
    forms.push(padded.slice(first, end))
  }
  return forms
}
