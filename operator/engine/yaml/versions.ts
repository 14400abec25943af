/** A resource version as the Concourse resource protocol gives it: string keys and values. */
export type Version = Readonly<Record<string, string>>

export type MetadataField = { readonly name: string; readonly value: string }

/**
 * The versions of one pipeline's resources, kept between runs: what a get
 * fetched and what a put created. The operator keeps them per pipeline;
 * `runnel runner` and tests use memoryVersions().
 */
export interface ResourceVersions {
  /** The version recorded last for `resource`, or undefined when none was. */
  latest(resource: string): Promise<Version | undefined>
  /** Records `version` as the latest of `resource`. */
  record(resource: string, version: Version, metadata: readonly MetadataField[]): Promise<void>
}

export type RecordedVersion = { readonly version: Version; readonly metadata: readonly MetadataField[] }

/** Versions kept in memory, in the order recorded; `history` is for tests and the runner's summary. */
export function memoryVersions(): ResourceVersions & { history(resource: string): readonly RecordedVersion[] } {
  const byResource = new Map<string, RecordedVersion[]>()
  return {
    latest: async (resource) => byResource.get(resource)?.at(-1)?.version,
    record: async (resource, version, metadata) => {
      const list = byResource.get(resource) ?? []
      list.push({ version: { ...version }, metadata: [...metadata] })
      byResource.set(resource, list)
    },
    history: (resource) => byResource.get(resource) ?? [],
  }
}

export function sameVersion(a: Version, b: Version): boolean {
  const keys = Object.keys(a)
  return keys.length === Object.keys(b).length && keys.every((key) => a[key] === b[key])
}
