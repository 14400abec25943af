/**
 * Where a run's `secret:KEY` values come from. The server's backends (SQLite,
 * S3, pipeline and global scopes) implement this later; `runnel runner` gives
 * the `--secret` values.
 */
export interface SecretResolver {
  /** The value of KEY, or undefined when the run was given no such secret. */
  get(key: string): Promise<string | undefined>
  /** Every value the run could see, for redaction: a run's output never shows one of them. */
  values(): Promise<readonly string[]>
}

export function staticSecrets(secrets: Readonly<Record<string, string>>): SecretResolver {
  const copy = new Map(Object.entries(secrets))
  return {
    get: async (key) => copy.get(key),
    values: async () => [...copy.values()],
  }
}
