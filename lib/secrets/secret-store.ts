import { badRequest } from "../core/errors.ts"
import type { SecretResolver } from "./secret-resolver.ts"

/**
 * Where secrets are kept, encrypted, by scope: `"global"` for every pipeline,
 * `"pipeline:<uid>"` for one pipeline, `"run:<id>"` for the global secrets
 * one run was given (`runnel pipeline run --global-secret`). The uid, not the name, so that a
 * pipeline deleted and created again under the same name does not inherit
 * the secrets of the old one.
 * - Every method validates the scope and throws `badRequest` for one of
 *   neither form.
 * - set() upserts all entries or none. Key names are environment-variable
 *   names of at most maxSecretKeyChars; values are strings of at most
 *   maxSecretValueBytes of UTF-8. Anything else throws `badRequest`, whose
 *   message names the key and the rule but never shows a value.
 * - get(), keys() and values() see every write made before them, also by
 *   another process using the same backend.
 * - A value that cannot be decrypted (altered, or copied from another
 *   scope or key) makes get() and values() throw; they never return garbage.
 * - close() is idempotent; any other call after it throws.
 */
export interface SecretStore {
  set(scope: string, entries: Readonly<Record<string, string>>): Promise<void>
  get(scope: string, key: string): Promise<string | undefined>
  /** The scope's key names, sorted by code unit; never a value. */
  keys(scope: string): Promise<string[]>
  /** False when the scope had no such key. */
  delete(scope: string, key: string): Promise<boolean>
  /** Removes every secret of the scope; returns how many there were. */
  deleteScope(scope: string): Promise<number>
  /** Every value of the scope, for redaction. */
  values(scope: string): Promise<string[]>
  close(): Promise<void>
}

export const globalScope = "global"

export const maxSecretKeyChars = 256
export const maxSecretValueBytes = 64 << 10

const keyPattern = /^[A-Za-z_][A-Za-z0-9_]*$/
const pipelineScopePrefix = "pipeline:"
const runScopePrefix = "run:"
/** Kubernetes uids are UUIDs; this admits them and any other plain identifier. */
const uidPattern = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/

/** The scope of one pipeline's secrets, by the pipeline's uid. */
export function pipelineScope(uid: string): string {
  if (!uidPattern.test(uid)) {
    throw badRequest(`pipeline uid "${uid}" is not valid: use 1 to 128 letters, digits, ".", "_" or "-"`)
  }
  return `${pipelineScopePrefix}${uid}`
}

/** The scope of the global secrets given to one run, by the run's id (its Run's name). */
export function runScope(id: string): string {
  if (!uidPattern.test(id)) {
    throw badRequest(`run id "${id}" is not valid: use 1 to 128 letters, digits, ".", "_" or "-"`)
  }
  return `${runScopePrefix}${id}`
}

export function assertSecretScope(scope: string): void {
  if (scope === globalScope) return
  for (const prefix of [pipelineScopePrefix, runScopePrefix]) {
    if (scope.startsWith(prefix) && uidPattern.test(scope.slice(prefix.length))) return
  }
  throw badRequest(`secret scope "${scope}" is not valid: use "global", "pipeline:<pipeline uid>" or "run:<run id>"`)
}

/** Throws `badRequest` for a key or value set() refuses. The message never contains the value. */
export function assertSecretEntry(key: string, value: unknown): void {
  if (key.length > maxSecretKeyChars) {
    throw badRequest(`secret name "${key.slice(0, 32)}…" is too long: at most ${maxSecretKeyChars} characters`)
  }
  if (!keyPattern.test(key)) {
    throw badRequest(
      `secret name "${key}" is not valid: use letters, digits and "_", not starting with a digit (like an environment variable)`,
    )
  }
  if (typeof value !== "string") throw badRequest(`secret "${key}" must have a string value`)
  if (Buffer.byteLength(value, "utf8") > maxSecretValueBytes) {
    throw badRequest(`secret "${key}" is too large: a value is at most ${maxSecretValueBytes / 1024} KiB of UTF-8`)
  }
}

/**
 * The entries of a set() as pairs, after checking the scope and every entry:
 * a backend calls it before it writes any, so a bad one leaves the store as it was.
 */
export function checkedEntries(scope: string, entries: Readonly<Record<string, string>>): [string, string][] {
  assertSecretScope(scope)
  const pairs = Object.entries(entries)
  for (const [key, value] of pairs) assertSecretEntry(key, value)
  return pairs
}

/**
 * A run's view of the store. `scopes` are looked up in order, so the pipeline's
 * scope goes before the global one and its values override the global ones
 * (interface.md, Secrets rule 1). values() is every value of every scope,
 * overridden ones included: a global value the run cannot read by name may
 * still turn up in its output and must be redacted too.
 */
export function resolverFor(store: Pick<SecretStore, "get" | "values">, scopes: readonly string[]): SecretResolver {
  const order = [...scopes]
  for (const scope of order) assertSecretScope(scope)
  return {
    async get(key) {
      for (const scope of order) {
        const value = await store.get(scope, key)
        if (value !== undefined) return value
      }
      return undefined
    },
    async values() {
      const all = new Set<string>()
      for (const scope of order) for (const value of await store.values(scope)) all.add(value)
      return [...all]
    },
  }
}

/** What the operator needs of the store: each run's view, and to forget a run's own secrets when it ends. */
export type RunSecrets = {
  forRun(run: { pipelineUid: string; runId: string }): SecretResolver
  ended(runId: string): Promise<void>
}

/**
 * Pipeline scope first, then the run's own global secrets, then the global
 * scope (interface.md, Secrets rule 1). With the `secrets` feature off, no
 * run resolves any secret.
 */
export function runSecrets(store: SecretStore, enabled: boolean): RunSecrets {
  if (!enabled) return { forRun: () => noSecrets, ended: async () => {} }
  return {
    forRun: ({ pipelineUid, runId }) => resolverFor(store, [pipelineScope(pipelineUid), runScope(runId), globalScope]),
    ended: async (runId) => {
      await store.deleteScope(runScope(runId))
    },
  }
}

const noSecrets: SecretResolver = { get: async () => undefined, values: async () => [] }
