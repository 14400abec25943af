import { type Browser, chromium } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type Standin, startOAuthServer, startStandin } from "./oauth-standins.ts"
import { type Json, type ServerProcess, serverProcesses } from "./server-process.ts"

// The browser login in a real browser: headless Chromium (Debian's) clicks the login page's
// button, goes through a GitLab stand-in and back, calls the API with its session cookie,
// approves a device code with the verification page's form, and logs out.

const servers = serverProcesses("runnel-login-chromium-")
let url: string
let gitlab: Standin
let browser: Browser

beforeAll(async () => {
  gitlab = await startStandin("gitlab")
  let server: ServerProcess
  ;[browser, server] = await Promise.all([
    chromium.launch({
      executablePath: "/usr/bin/chromium",
      headless: true,
      args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
    }),
    startOAuthServer(servers, { gitlab }, "chromium-login-session-secret-32-characters"),
  ])
  url = server.url
}, 60_000)
afterAll(async () => {
  await browser?.close()
  servers.cleanUp()
  await gitlab?.close()
})

describe("the browser login in headless Chromium", () => {
  it("logs in with the login page's button, reads the API, approves a device code and logs out", async () => {
    const context = await browser.newContext()
    const page = await context.newPage()
    await page.goto(`${url}/auth/login?next=/api/me`)
    await page.getByRole("button", { name: "Log in with GitLab" }).click()
    await page.waitForURL(`${url}/api/me`)
    const me = JSON.parse((await page.textContent("body")) ?? "")
    expect(me).toMatchObject({ actor: "gitlab:gitlab-alice", Groups: ["platform", "platform/deploy-team", "docs"] })
    const [cookie] = await context.cookies(url)
    expect(cookie).toMatchObject({ name: "runnel_session", httpOnly: true, sameSite: "Lax", secure: false, path: "/" })

    // The device grant, approved with the page's own form: a real browser's Origin passes the cross-site check.
    const grant: Json = await (
      await fetch(`${url}/auth/device/code`, {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: "client_id=runnel-cli",
      })
    ).json()
    await page.goto(`${url}/auth/device`)
    await page.getByLabel("Code shown by runnel login").fill(grant.user_code.toLowerCase())
    await page.getByRole("button", { name: "Continue" }).click()
    await expect.poll(() => page.textContent(".code")).toBe(grant.user_code)
    await page.getByRole("button", { name: "Approve" }).click()
    await page.waitForSelector("text=Approved.")
    const token = await fetch(`${url}/auth/device/token`, {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({
        grant_type: "urn:ietf:params:oauth:grant-type:device_code",
        device_code: grant.device_code,
      }),
    })
    expect(token.status).toBe(200)
    const { access_token: accessToken }: Json = await token.json()
    const api = await fetch(`${url}/api/me`, { headers: { Authorization: `Bearer ${accessToken}` } })
    expect(((await api.json()) as Json).actor).toBe("gitlab:gitlab-alice")

    await page.goto(`${url}/auth/login`)
    expect(await page.textContent("body")).toContain("Logged in as Alice Liddell (gitlab:gitlab-alice)")
    await page.getByRole("button", { name: "Log out" }).click()
    await page.waitForURL(`${url}/auth/login`)
    expect(await context.cookies(url)).toEqual([])
    const after = await page.goto(`${url}/api/me`)
    expect(after?.status()).toBe(401)
    await context.close()
  }, 60_000)
})
