import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"

// biome-ignore lint/suspicious/noExplicitAny: tool answers are read field by field.
export type ToolAnswer = { isError: boolean; text: string; json: any }

/**
 * The official SDK's client of the MCP endpoint at `base` (Streamable HTTP), sending `headers` with
 * every request; `call` answers what a model reads: the text item, parsed when it is JSON.
 */
export async function mcpClient(base: string, headers: Record<string, string> = {}) {
  const client = new Client({ name: "runnel-test", version: "1.0.0" })
  await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`), { requestInit: { headers } }))
  return {
    client,
    async call(name: string, args: Record<string, unknown> = {}): Promise<ToolAnswer> {
      const result = await client.callTool({ name, arguments: args })
      const text = (result.content as { text: string }[])[0]?.text ?? ""
      return { isError: result.isError === true, text, json: result.isError === true ? undefined : JSON.parse(text) }
    },
  }
}
