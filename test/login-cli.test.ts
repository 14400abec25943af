import { spawn } from "node:child_process"
import { mkdtempSync, readFileSync, statSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { BrowserSession } from "./browser-session.ts"
import { runnel, runnelBin } from "./cli.ts"
import { type Standin, startOAuthServer, startStandin } from "./oauth-standins.ts"
import { type ServerProcess, serverProcesses } from "./server-process.ts"

// `runnel login` end to end: the CLI process prints a code, a browser session (real HTTP with its
// cookie jar) logs in with a GitHub stand-in and approves the code, the CLI stores the token in its
// auth config (mode 0600), and the next commands use it. And what a 401 prints.

const servers = serverProcesses("runnel-login-cli-")
let server: ServerProcess
let url: string
let github: Standin

beforeAll(async () => {
  github = await startStandin("github")
  server = await startOAuthServer(servers, { github }, "cli-login-session-secret-of-32-characters")
  url = server.url
}, 60_000)
afterAll(async () => {
  servers.cleanUp()
  await github?.close()
})

/** `runnel login` in its own process: resolves with its user code once printed, and with its end. */
function startLogin(args: readonly string[], env: NodeJS.ProcessEnv = {}) {
  const child = spawn(runnelBin, ["login", ...args], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  })
  let stdout = ""
  let stderr = ""
  child.stderr.setEncoding("utf8").on("data", (text: string) => {
    stderr += text
  })
  const ended = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) =>
    child.on("close", (code) => resolve({ code, stdout, stderr })),
  )
  const userCode = new Promise<string>((resolve, reject) => {
    child.stdout.setEncoding("utf8").on("data", (text: string) => {
      stdout += text
      const match = /\n {4}([A-Z]{4}-[A-Z]{4})\n/.exec(stdout)
      if (match?.[1] !== undefined) resolve(match[1])
    })
    child.on("close", () => reject(new Error(`runnel login ended before printing a code: ${stdout}${stderr}`)))
  })
  return { userCode, ended, output: () => stdout }
}

/** A person at a browser: opens the verification page, logs in with GitHub on the way, and decides. */
async function decideInBrowser(userCode: string, decision: "approve" | "deny") {
  const browser = new BrowserSession()
  const first = await browser.follow(`${url}/auth/device?user_code=${userCode}`)
  // Not logged in yet: the verification page sent the browser to the login page.
  expect(first.visited[1]).toBe(`${url}/auth/login?next=${encodeURIComponent(`/auth/device?user_code=${userCode}`)}`)
  expect(await first.response.text()).toContain("Log in with GitHub")
  const { response, visited } = await browser.follow(
    `${url}/auth/github/login?next=${encodeURIComponent(`/auth/device?user_code=${userCode}`)}`,
  )
  expect(visited.at(-1)).toBe(`${url}/auth/device?user_code=${userCode}`)
  const page = await response.text()
  expect(page).toContain(`<p class="code">${userCode}</p>`)
  const answer = await browser.request(`${url}/auth/device`, {
    method: "POST",
    form: { user_code: userCode, decision },
    origin: url,
  })
  expect(answer.status).toBe(200)
}

describe("runnel login", () => {
  it("prints the code, waits for the browser's approval, stores the token with mode 0600, and the next commands use it", async () => {
    const home = mkdtempSync(join(servers.dir, "home-"))
    const config = join(home, ".runnel", "auth.config")
    const login = startLogin(["-s", url], { HOME: home })
    const userCode = await login.userCode
    expect(login.output()).toContain(`To log in to ${url}, open ${url}/auth/device in a browser and enter the code`)
    await decideInBrowser(userCode, "approve")
    const result = await login.ended
    expect(result.stderr).toBe("")
    expect(result.code).toBe(0)
    expect(result.stdout).toContain(`Logged in to ${url} as github:octocat; the token is in ${config}`)
    expect(statSync(config).mode & 0o777).toBe(0o600)
    const stored = JSON.parse(readFileSync(config, "utf8"))
    expect(Object.keys(stored)).toEqual(["servers"])
    expect(stored.servers[url]).toEqual({ token: expect.stringMatching(/^[\w-]+\.[\w-]+\.[\w-]+$/) })

    const ls = await runnel(["pipeline", "ls", "-s", url], { env: { HOME: home } })
    expect(ls.stderr).toBe("")
    expect(ls.code).toBe(0)
    const whoami = await runnel(["whoami", "-s", url], { env: { HOME: home } })
    expect(whoami.code).toBe(0)
    expect(whoami.stdout).toContain("actor:         github:octocat")
    expect(whoami.stdout).toContain("organizations: corp, corp-infra, open-source")

    const logout = await runnel(["logout", "-s", url], { env: { HOME: home } })
    expect(logout.stdout).toBe(`Logged out of ${url}: its token is removed from ${config}\n`)
    expect(JSON.parse(readFileSync(config, "utf8"))).toEqual({ servers: {} })
    const after = await runnel(["pipeline", "ls", "-s", url], { env: { HOME: home } })
    expect(after.code).toBe(1)
    expect((await runnel(["logout", "-s", url], { env: { HOME: home } })).stdout).toBe(
      `No login for ${url} in ${config}\n`,
    )
    // The token logs in wherever it is given: CI_AUTH_TOKEN comes first.
    const viaEnv = await runnel(["whoami", "-s", url, "-c", join(home, "none")], {
      env: { CI_AUTH_TOKEN: stored.servers[url].token },
    })
    expect(viaEnv.stdout).toContain("actor:         github:octocat")
    expect(server.stdout()).toContain('"msg":"auth.device_approved"')
    expect(server.stdout()).not.toContain(stored.servers[url].token)
  }, 60_000)

  it("fails with exit 1 and says so when the login is denied in the browser; -c names the file", async () => {
    const config = join(mkdtempSync(join(servers.dir, "deny-")), "auth.config")
    const login = startLogin(["-s", url, "-c", config])
    await decideInBrowser(await login.userCode, "deny")
    const result = await login.ended
    expect(result.code).toBe(1)
    expect(result.stderr).toBe(
      `runnel: login to ${url} failed: the login was denied in the browser; run runnel login again\n`,
    )
    expect(() => statSync(config)).toThrow()
  }, 60_000)
})

describe("a 401 from a client command", () => {
  it("prints the server's URL, runnel login -s <url> and CI_AUTH_TOKEN, with the server's reason", async () => {
    const config = join(servers.dir, "empty.config")
    const none = await runnel(["pipeline", "ls", "-s", url, "-c", config])
    expect(none.code).toBe(1)
    expect(none.stderr).toMatch(
      new RegExp(
        `^runnel: ${url} needs authentication \\(.+\\): log in with \`runnel login -s ${url}\` or set CI_AUTH_TOKEN\\n$`,
      ),
    )
    const forged = await runnel(["pipeline", "ls", "-s", url, "--auth-token", "a.b.c"])
    expect(forged.code).toBe(1)
    expect(forged.stderr).toContain(`${url} needs authentication (the bearer token is not a well-formed JWT`)
    expect(forged.stderr).toContain(`runnel login -s ${url}`)
    expect(forged.stderr).toContain("CI_AUTH_TOKEN")
  })

  it("warns when the auth config is readable by others, and refuses one that is not JSON", async () => {
    const loose = join(servers.dir, "loose.config")
    writeFileSync(loose, JSON.stringify({ servers: {} }), { mode: 0o644 })
    const warned = await runnel(["whoami", "-s", url, "-c", loose])
    expect(warned.stderr).toContain(`${loose} is readable by others (mode 0644)`)
    const broken = join(servers.dir, "broken.config")
    writeFileSync(broken, "{not json", { mode: 0o600 })
    const refused = await runnel(["login", "-s", url, "-c", broken])
    expect(refused.code).toBe(2)
    expect(refused.stderr).toBe(`runnel: the auth config ${broken} is not JSON; delete it and run runnel login again\n`)
  })
})

describe("runnel login against a server without OAuth", () => {
  // Last in this file: it leaves this test's address (127.0.0.1) without device codes for ten minutes.
  it("says why when the server refuses more device codes from this address (429), with the wait", async () => {
    const asked = []
    for (let i = 0; i < 6; i++) {
      asked.push(
        (await fetch(`${url}/auth/device/code`, { method: "POST", body: new URLSearchParams({ client_id: "x" }) }))
          .status,
      )
    }
    expect(asked).toContain(429)
    const result = await runnel(["login", "-s", url, "-c", join(servers.dir, "refused.config")])
    expect(result.code).toBe(1)
    expect(result.stderr).toMatch(
      /^runnel: too many logins started from this address \(10 a minute, or too many under way\); try again in \d+ s\n$/,
    )
  })

  it("says the server has no OAuth login", async () => {
    const open = await servers.start()
    const result = await runnel(["login", "-s", open.url, "-c", join(servers.dir, "open.config")])
    expect(result.code).toBe(1)
    expect(result.stderr).toMatch(/^runnel: this server has no OAuth login: start it with/)
    const whoami = await runnel(["whoami", "-s", open.url, "-c", join(servers.dir, "open.config")])
    expect(whoami.stdout).toBe("actor:         anonymous\n(this server has no authentication: everyone is anonymous)\n")
  }, 60_000)
})
