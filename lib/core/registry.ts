import { badRequest } from "./errors.ts"

/** A list of named implementations written out by hand; unknown names fail loudly with the known ones. */
export function registry<T extends { readonly name: string }>(kind: string, items: readonly T[]) {
  const byName = new Map(items.map((item) => [item.name, item]))
  if (byName.size !== items.length) throw new Error(`a ${kind} is registered twice`)
  return {
    names: () => [...byName.keys()],
    get(name: string): T {
      const item = byName.get(name)
      if (item === undefined) throw badRequest(`unknown ${kind} "${name}"; known: ${[...byName.keys()].join(", ")}`)
      return item
    },
  }
}
