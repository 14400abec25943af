import { bitbucket } from "./providers/bitbucket.ts"
import { generic } from "./providers/generic.ts"
import { github } from "./providers/github.ts"
import { gitlab } from "./providers/gitlab.ts"
import { honeybadger } from "./providers/honeybadger.ts"
import { linear } from "./providers/linear.ts"
import { pagerduty } from "./providers/pagerduty.ts"
import { sentry } from "./providers/sentry.ts"
import { slack } from "./providers/slack.ts"
import { stripe } from "./providers/stripe.ts"
import { accepted, refused } from "./signature.ts"
import type { IncomingWebhook, Verification, VerifyOptions, WebhookProvider } from "./webhook-provider.ts"

export type { IncomingWebhook, Verification, VerifyOptions, WebhookProvider } from "./webhook-provider.ts"

/**
 * Every webhook provider, in detection order (interface.md, Incoming webhooks):
 * the first whose header is present wins, so the order is behaviour. generic
 * matches everything and stays last.
 */
export const webhookProviders = [
  github,
  gitlab,
  bitbucket,
  slack,
  honeybadger,
  stripe,
  pagerduty,
  linear,
  sentry,
  generic,
] as const satisfies readonly WebhookProvider[]

export type DetectedWebhook = { provider: string; eventType: string }

/** Slack and Stripe's own libraries allow five minutes between signing and receipt. */
export const defaultMaxAgeMs = 5 * 60_000

/** The provider whose header `request` carries (detection reads headers alone); generic when none. Never throws. */
export function providerOf(request: Pick<IncomingWebhook, "headers">): WebhookProvider {
  for (const provider of webhookProviders) if (provider.matches(request)) return provider
  return generic
}

/** The provider that sent `request` and its event type ("" when the request does not say). Never throws. */
export function detectProvider(request: IncomingWebhook): DetectedWebhook {
  const provider = providerOf(request)
  return { provider: provider.name, eventType: provider.eventType(request) }
}

/**
 * Whether `request` may trigger a pipeline whose webhook secret is `secret`
 * (undefined or "" when none is configured). Without a secret a request is
 * accepted unverified, except from a provider that sends the secret itself
 * (honeybadger); with one, a missing or wrong signature is refused. A refusal
 * is an HTTP 401 whose message says what is missing or wrong and never holds
 * the secret or the expected signature. Never throws.
 */
export function verifyWebhook(
  request: IncomingWebhook,
  provider: string,
  secret: string | undefined,
  options: VerifyOptions = { now: new Date(), maxAgeMs: defaultMaxAgeMs },
): Verification {
  const found = webhookProviders.find((candidate) => candidate.name === provider)
  if (found === undefined) {
    return refused(`unknown webhook provider "${provider}"; known: ${webhookProviders.map((p) => p.name).join(", ")}`)
  }
  if (secret === undefined || secret === "") {
    if (!found.secretRequired) return accepted
    return refused(
      `${found.name} webhooks carry the webhook secret itself, so they are refused until the pipeline has a webhook secret; set one and configure the same value in ${found.name}`,
    )
  }
  return found.verify(request, secret, options)
}

/**
 * verifyWebhook with the secret a watch holds (`watched`; undefined when it
 * holds none) and, when that does not verify, with the one `read` reads
 * now: the watch may not have brought a secret changed a moment ago. A
 * delivery signed with the watched secret costs no read; a rejection of
 * `read` (the secret gone) is the caller's to answer.
 */
export async function verifyWithWatchedSecret(
  request: IncomingWebhook,
  provider: string,
  watched: string | undefined,
  read: () => Promise<string | undefined>,
  options: VerifyOptions,
): Promise<Verification> {
  const verdict = watched === undefined ? undefined : verifyWebhook(request, provider, watched, options)
  return verdict?.ok === true ? verdict : verifyWebhook(request, provider, await read(), options)
}
