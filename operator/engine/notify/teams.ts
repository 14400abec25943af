import { type NotifyBackend, urlField } from "./notify-backend.ts"

/**
 * A Microsoft Teams workflow webhook ("Post to a channel when a webhook
 * request is received"): a message activity carrying one Adaptive Card whose
 * body is the text, which is the shape those workflows accept.
 */
export const teamsBackend: NotifyBackend = {
  name: "teams",
  check(config, where) {
    urlField(config, "webhook", where, "secret:TEAMS_WEBHOOK")
  },
  async send(config, notification, deliver) {
    const card = {
      type: "message",
      attachments: [
        {
          contentType: "application/vnd.microsoft.card.adaptive",
          contentUrl: null,
          content: {
            $schema: "http://adaptivecards.io/schemas/adaptive-card.json",
            type: "AdaptiveCard",
            version: "1.4",
            body: [{ type: "TextBlock", text: notification.message, wrap: true }],
          },
        },
      ],
    }
    await deliver({
      url: config.webhook as string,
      method: "POST",
      headers: [["content-type", "application/json"]],
      body: JSON.stringify(card),
    })
  },
}
