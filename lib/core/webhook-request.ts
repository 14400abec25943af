/**
 * A webhook as a pipeline sees it (interface.md "Incoming webhooks"): the API
 * server builds it from the HTTP request and keeps it in the Run
 * (`spec.trigger.webhook`); the operator hands it to the engine, which gives
 * it to the script as `http.request()` and to `webhookTrigger()` expressions.
 */
export type WebhookRequest = {
  /** The detected sender in lower case (`github`, `stripe`, ...), `generic` when none matched. */
  readonly provider: string
  /** The provider's event type; "" for `generic`. */
  readonly eventType: string
  /** HTTP method, upper case. */
  readonly method: string
  /** Path with its query string. */
  readonly url: string
  /** Names in lower case; a repeated header's values joined with ", ". */
  readonly headers: Readonly<Record<string, string>>
  /** A repeated parameter's values joined with ", ". */
  readonly query: Readonly<Record<string, string>>
  /** The raw body, as received. */
  readonly body: string
}

/**
 * What a pipeline answered with `http.respond()`, as `status.webhookResponse`
 * of the Run keeps it and the API server sends it: `status` 100-599, header
 * values strings, `body` text (an object the script gave is JSON by now).
 */
export type WebhookResponse = {
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
}

/**
 * The log store attachment that holds a webhook body too large to keep in
 * its Run (`spec.trigger.webhook.bodyStored: true`).
 */
export const webhookBodyAttachment = "webhook-body"
