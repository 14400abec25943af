import type { Browser } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { issueToken } from "../apiserver/auth/session-token.ts"
import { providerUser } from "../apiserver/auth/user.ts"
import { launchChromium, screenshot } from "./browser.ts"
import { type Standin, startOAuthServer, startStandin } from "./oauth-standins.ts"
import { call, type ServerProcess, serverProcesses } from "./server-process.ts"

// The web UI with authentication on (OAuth, a GitLab stand-in on loopback), in headless Chromium: the
// page sends a visitor to the login page, and once logged in shows only what the API answers that user:
// the pipelines whose RBAC expression the user passes (the API applies it; the page decides nothing).
const servers = serverProcesses("runnel-ui-login-test-")
const sessionSecret = "ui-login-session-secret-0123456789abcdef"
let gitlab: Standin
let browser: Browser
let server: ServerProcess

const noop = "export const pipeline = async () => {}\n"

beforeAll(async () => {
  gitlab = await startStandin("gitlab")
  ;[browser, server] = await Promise.all([launchChromium(), startOAuthServer(servers, { gitlab }, sessionSecret)])
  const admin = await issueToken(
    sessionSecret,
    providerUser({
      UserID: "id-admin",
      Email: "admin@example.com",
      Name: "Admin",
      NickName: "admin",
      Provider: "github",
      Organizations: [],
      Groups: ["docs", "secret-team"],
    }),
  )
  for (const [name, rbac] of [
    ["for-docs", '"docs" in Groups'],
    ["secret-only", '"secret-team" in Groups'],
  ]) {
    const stored = await fetch(`${server.url}/api/pipelines/${name}`, {
      method: "PUT",
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${admin}` },
      body: JSON.stringify({ content: noop, rbac_expression: rbac }),
    })
    expect(stored.status).toBe(201)
  }
}, 60_000)
afterAll(async () => {
  await browser?.close()
  servers.cleanUp()
  await gitlab?.close()
})

describe("the web UI with a browser login", () => {
  it("sends a visitor to the login page and back, then shows only the pipelines the user may see, under their name", async () => {
    expect((await call(server.url, "GET", "/api/pipelines")).status).toBe(401)
    const context = await browser.newContext()
    const page = await context.newPage()
    await page.goto(`${server.url}/`)
    await page.waitForURL(/\/auth\/login\?next=%2F$/)
    await page.getByRole("button", { name: "Log in with GitLab" }).click()
    await page.waitForURL(`${server.url}/`)
    // What the API answers this user, with the page's own session cookie, is what the page lists.
    const visible = (await page.evaluate(
      'fetch("/api/pipelines").then((r) => r.json()).then((page) => page.items.map((p) => p.name))',
    )) as string[]
    expect(visible).toEqual(["for-docs"]) // Alice is in "docs", not in "secret-team"
    const names = page.locator("tbody tr td:first-child")
    await expect.poll(() => names.allTextContents()).toEqual(visible)
    expect(await page.locator(".top .user").textContent()).toBe("Signed in as Alice Liddell Log out")
    await screenshot(page, "ui-logged-in")
    const hidden = await page.evaluate(
      'fetch("/api/pipelines/secret-only").then(async (r) => [r.status, (await r.json()).error])',
    )
    await page.goto(`${server.url}/pipelines/secret-only`)
    await expect.poll(() => page.getByRole("alert").textContent()).toBe((hidden as [number, string])[1])
    await context.close()
  })
})

describe("the web UI with Basic Auth", () => {
  it("asks for the browser's own password prompt, then shows the pipelines with the credentials given", async () => {
    const basic = await servers.start(["--basic-auth-username", "ui-user", "--basic-auth-password", "ui-password-1"])
    const authorization = `Basic ${Buffer.from("ui-user:ui-password-1").toString("base64")}`
    const stored = await fetch(`${basic.url}/api/pipelines/with-basic`, {
      method: "PUT",
      headers: { "Content-Type": "application/json", Authorization: authorization },
      body: JSON.stringify({ content: noop }),
    })
    expect(stored.status).toBe(201)
    const page = await fetch(`${basic.url}/`)
    expect(page.status).toBe(401)
    expect(page.headers.get("www-authenticate")).toMatch(/^Basic /)
    const context = await browser.newContext({ httpCredentials: { username: "ui-user", password: "ui-password-1" } })
    const tab = await context.newPage()
    await tab.goto(`${basic.url}/`)
    await expect.poll(() => tab.locator("tbody tr td:first-child").allTextContents()).toEqual(["with-basic"])
    await context.close()
  })
})
