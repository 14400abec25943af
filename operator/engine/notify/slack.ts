import { type NotifyBackend, requiredString, show } from "./notify-backend.ts"

/**
 * Slack's Web API: `chat.postMessage` once per channel, the token as a Bearer
 * header and a JSON body `{channel, text}`. Slack answers 200 with
 * `{"ok": false, "error": "channel_not_found"}` when it refuses, so the body
 * decides, not the status. The API's base URL is the server's
 * `--slack-api-url` (a Slack-compatible server, or a test's stand-in).
 */
export function slackBackend(apiUrl: string): NotifyBackend {
  const endpoint = `${apiUrl.replace(/\/+$/, "")}/chat.postMessage`
  return {
    name: "slack",
    check(config, where) {
      requiredString(config, "token", where, "secret:SLACK_TOKEN")
      const channels = config.channels
      if (
        !Array.isArray(channels) ||
        channels.length === 0 ||
        !channels.every((channel) => typeof channel === "string" && channel !== "")
      ) {
        throw new TypeError(
          `${where} needs channels, a non-empty list of channel names or ids such as ["#builds"]; got ${show(channels)}`,
        )
      }
    },
    async send(config, notification, deliver) {
      for (const channel of config.channels as string[]) {
        const { body } = await deliver({
          url: endpoint,
          method: "POST",
          headers: [
            ["authorization", `Bearer ${config.token as string}`],
            ["content-type", "application/json; charset=utf-8"],
          ],
          body: JSON.stringify({ channel, text: notification.message }),
        })
        let answer: { ok?: unknown; error?: unknown }
        try {
          answer = JSON.parse(body) as typeof answer
        } catch {
          throw new Error(
            `Slack answered channel ${channel} with something other than JSON: ${body.split("\n")[0]?.slice(0, 200)}`,
          )
        }
        if (answer.ok !== true) {
          throw new Error(
            `Slack refused the message to channel ${channel}: ${String(answer.error ?? "no error code given")}`,
          )
        }
      }
    },
  }
}
