import type { Aad, Sealed, Sealer } from "./sealer.ts"

/**
 * A known text sealed with the key a store was created with, and kept in the
 * store: opening the store with another key then fails at open, with a
 * message saying which key to give, instead of at the first value read (or
 * never, for a store that is only written to, whose values no key could
 * later read).
 */
export type KeyCheck = { readonly text: string; readonly aad: Aad }

/** Where a store keeps its key check, in whatever form it stores one (`S`, with more fields beside the sealed parts). */
type KeyCheckStorage<S extends Sealed> = {
  /** The key check the store holds, as read before; undefined when it had none. */
  readonly stored: S | undefined
  /**
   * Stores `fresh` unless the store holds a key check by now, and returns
   * the one it holds: atomically (in one transaction), so that of two
   * processes creating a store at once, the second checks its key against
   * the first's.
   */
  storeIfMissing(fresh: Sealed): S
}

/**
 * Checks `sealer`'s key against the store's key check, storing one sealed
 * with it first if the store has none. `matches` is true when the key is the
 * one the store was created with; `stored` is the store's key check, which
 * says more (how the key was chosen, say) when it is not.
 */
export function checkKey<S extends Sealed>(
  sealer: Sealer,
  check: KeyCheck,
  storage: KeyCheckStorage<S>,
): { matches: boolean; stored: S } {
  const stored = storage.stored ?? storage.storeIfMissing(sealer.seal(check.text, check.aad))
  return { matches: sealer.unseal(stored, check.aad) === check.text, stored }
}
