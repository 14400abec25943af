/**
 * The candidate closest to `word`, when one is close enough to be a likely
 * typo: same letters ignoring case and `-` versus `_`, or an edit distance
 * (insertions, deletions, substitutions, swaps of neighbours) of at most 1 for
 * short words and 2 for words of five letters or more.
 */
export function didYouMean(word: string, candidates: Iterable<string>): string | undefined {
  const normal = normalise(word)
  const limit = word.length >= 5 ? 2 : 1
  let best: string | undefined
  let bestDistance = Number.POSITIVE_INFINITY
  for (const candidate of candidates) {
    if (candidate === word) continue
    const candidateNormal = normalise(candidate)
    const distance = candidateNormal === normal ? 0 : editDistance(normal, candidateNormal, limit)
    if (distance <= limit && distance < bestDistance) {
      best = candidate
      bestDistance = distance
    }
  }
  return best
}

/** ` did you mean "plan"?` or nothing, ready to append to a message. */
export function suggestion(word: string, candidates: Iterable<string>): string {
  const close = didYouMean(word, candidates)
  return close === undefined ? "" : `; did you mean "${close}"?`
}

function normalise(word: string): string {
  return word.toLowerCase().replaceAll("-", "_")
}

/**
 * Optimal string alignment distance, giving up (returning limit + 1) once it
 * is certain to exceed `limit`: unknown keys can be long, candidates are few.
 */
export function editDistance(a: string, b: string, limit = Number.POSITIVE_INFINITY): number {
  if (Math.abs(a.length - b.length) > limit) return limit + 1
  let before: number[] = []
  let previous: number[] = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    const current: number[] = [i]
    let rowMin = i
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1
      let value = Math.min((previous[j] ?? 0) + 1, (current[j - 1] ?? 0) + 1, (previous[j - 1] ?? 0) + cost)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        value = Math.min(value, (before[j - 2] ?? 0) + 1)
      }
      current.push(value)
      rowMin = Math.min(rowMin, value)
    }
    if (rowMin > limit) return limit + 1
    before = previous
    previous = current
  }
  return previous[b.length] ?? 0
}
