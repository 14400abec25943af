import { badRequest } from "../core/errors.ts"

/** Every feature gate of interface.md, in the order `GET /api/features` lists them. */
export const knownFeatures = ["webhooks", "secrets", "notifications", "fetch", "schedules", "gates"] as const

export type Feature = (typeof knownFeatures)[number]

/** What `*` enables: all but `schedules` and `gates`, which must be named. */
export const defaultFeatures: readonly Feature[] = ["webhooks", "secrets", "notifications", "fetch"]

/**
 * `--allowed-features` ("*", "*,schedules,gates", "webhooks,fetch", "" for none) into the
 * enabled features; an unknown name is refused with the known ones listed.
 */
export function parseFeatures(text: string): readonly Feature[] {
  const enabled = new Set<Feature>()
  for (const raw of text.split(",")) {
    const name = raw.trim()
    if (name === "") continue
    if (name === "*") {
      for (const feature of defaultFeatures) enabled.add(feature)
    } else if ((knownFeatures as readonly string[]).includes(name)) {
      enabled.add(name as Feature)
    } else {
      throw badRequest(
        `--allowed-features: unknown feature "${name}"; known: ${knownFeatures.join(", ")} ("*" is ${defaultFeatures.join(", ")})`,
      )
    }
  }
  return Object.freeze(knownFeatures.filter((feature) => enabled.has(feature)))
}
