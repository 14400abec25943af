import type { OAuthProvider } from "../../lib/config/auth.ts"
import { notFound } from "../../lib/core/errors.ts"
import type { LoginProvider } from "./login-provider.ts"
import { github } from "./providers/github.ts"
import { gitlab } from "./providers/gitlab.ts"
import { microsoft } from "./providers/microsoft.ts"

export type { LoginProvider } from "./login-provider.ts"

const byName = { github, gitlab, microsoft } as const

/** The enabled providers, in the order of their flags, each calling back to `<callbackUrl>/auth/<segment>/callback`. */
export function loginProviders(callbackUrl: string, providers: readonly OAuthProvider[]) {
  const enabled = providers.map((settings) => {
    const make = byName[settings.name]
    return make(settings, callbackUrl)
  })
  return {
    all: enabled as readonly LoginProvider[],
    /** The provider of a path segment, or a 404 naming the enabled ones. */
    get(segment: string): LoginProvider {
      const found = enabled.find((provider) => provider.segment === segment)
      if (found === undefined) {
        throw notFound(
          "login provider",
          segment.slice(0, 40),
          `this server logs in with ${enabled.map((provider) => provider.segment).join(", ")}`,
        )
      }
      return found
    },
  }
}
export type LoginProviders = ReturnType<typeof loginProviders>
