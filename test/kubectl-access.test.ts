import { execFile } from "node:child_process"
import { mkdirSync, writeFileSync } from "node:fs"
import { request } from "node:https"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { issueToken } from "../apiserver/auth/session-token.ts"
import { testUser } from "../apiserver/auth/test-user.fixture.ts"
import { certificateAuthority, serverCertificate } from "../lib/crypto/certificates.ts"
import { runnel } from "./cli.ts"
import { eventually, type ServerProcess, serverProcesses } from "./server-process.ts"

// The embedded Kubernetes API at /k8s with authentication on, driven by the real kubectl (/usr/bin/kubectl)
// with the kubeconfig `runnel kubeconfig` prints, as a user would: refused without credentials, answered
// for an admin, refused for a non-admin, under OAuth and under Basic Auth; and what admins change is
// audited with their actor.

const servers = serverProcesses("runnel-kubectl-access-")
afterAll(() => servers.cleanUp())

const sessionSecret = "kubectl-access-test-session-secret-0123456789"
const oauthFlags = (url: string) => [
  "--oauth-github-client-id",
  "runnel-test",
  "--oauth-github-client-secret",
  "runnel-test-secret",
  "--oauth-session-secret",
  sessionSecret,
  "--oauth-callback-url",
  url,
]
type Result = { code: number; stdout: string; stderr: string }

function kubectl(cwd: string, kubeconfig: string, ...args: string[]): Promise<Result> {
  return new Promise((resolve) => {
    execFile(
      "kubectl",
      ["--cache-dir", join(cwd, "kube-cache"), ...args],
      { env: { ...process.env, KUBECONFIG: kubeconfig }, timeout: 30_000 },
      (error, stdout, stderr) =>
        resolve({ code: error === null ? 0 : typeof error.code === "number" ? error.code : 1, stdout, stderr }),
    )
  })
}

/** `runnel kubeconfig` with these arguments, its output kept in a file for kubectl. */
async function printedKubeconfig(
  server: ServerProcess,
  file: string,
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ path: string; stderr: string; text: string }> {
  const printed = await runnel(["kubeconfig", ...args], { cwd: server.cwd, env: { HOME: server.cwd, ...env } })
  expect(printed.code, printed.stderr).toBe(0)
  const path = join(server.cwd, file)
  writeFileSync(path, printed.stdout)
  return { path, stderr: printed.stderr, text: printed.stdout }
}

const manifest = (name: string) => `apiVersion: runnel.dev/v1alpha1
kind: Pipeline
metadata:
  name: ${name}
spec:
  content: "export async function pipeline() {}"
`

/** The audit entries the server wrote on stdout (one JSON line each). */
const auditEntries = (server: ServerProcess) =>
  server
    .stdout()
    .split("\n")
    .filter((line) => line.startsWith("{"))
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .filter((entry) => entry.kind === "audit")

const fingerprintIn = (text: string) => /SHA-256 ([0-9A-F:]{95})/.exec(text)?.[1]

describe("kubectl against /k8s under OAuth, with the server's own certificate authority", () => {
  let server: ServerProcess
  let adminToken: string
  let outsiderToken: string

  it("refuses kubectl without credentials with 401, and says so in a Kubernetes Status", async () => {
    server = await servers.start([...oauthFlags("http://127.0.0.1:1"), "--k8s-admin-rbac", '"ops" in Groups'])
    adminToken = await issueToken(sessionSecret, testUser("alice", ["ops"]))
    outsiderToken = await issueToken(sessionSecret, testUser("bob", ["dev"]))

    const anonymous = await kubectl(
      server.cwd,
      join(server.cwd, "none"),
      "--server",
      `${server.url}/k8s`,
      "get",
      "pipelines.runnel.dev",
    )
    expect(anonymous.code).toBe(1)
    expect(anonymous.stderr).toContain("error: You must be logged in to the server")

    const status = await fetch(`${server.url}/k8s/apis/runnel.dev/v1alpha1/namespaces/default/pipelines`)
    expect(status.status).toBe(401)
    expect(await status.json()).toMatchObject({
      kind: "Status",
      apiVersion: "v1",
      status: "Failure",
      reason: "Unauthorized",
      code: 401,
    })

    const wrongToken = await printedKubeconfig(server, "wrong.kubeconfig", [
      "-s",
      server.url,
      "--auth-token",
      await issueToken("another-servers-secret-0123456789abcdef", testUser("alice", ["ops"])),
    ])
    const refused = await kubectl(server.cwd, wrongToken.path, "get", "pipelines.runnel.dev")
    expect(refused.code).toBe(1)
    expect(refused.stderr).toContain("error: You must be logged in to the server")
  })

  it("works for an admin with the printed kubeconfig, over TLS from the authority the server named at start", async () => {
    const printed = await printedKubeconfig(server, "admin.kubeconfig", ["-s", server.url, "--auth-token", adminToken])
    expect(printed.text).toContain(`server: ${server.url.replace("http://", "https://")}/k8s`)
    expect(printed.text).toContain("certificate-authority-data: ")
    expect(printed.text).toContain(`token: ${adminToken}`)
    expect(printed.text).toContain("namespace: default")
    const announced = fingerprintIn(server.stderr())
    expect(announced).toBeDefined()
    expect(fingerprintIn(printed.stderr)).toBe(announced)

    const applied = await kubectl(server.cwd, printed.path, "apply", "-f", writeManifest(server, "hello"))
    expect(applied, applied.stderr).toMatchObject({ code: 0, stdout: "pipeline.runnel.dev/hello created\n" })
    // The operator in the process reaches /k8s with its own token: it checks the pipeline and makes it Ready.
    const ready = await eventually(
      () => kubectl(server.cwd, printed.path, "get", "pipelines.runnel.dev", "hello", "-o", "json"),
      (result) => result.code === 0 && JSON.parse(result.stdout).status?.conditions?.[0]?.status === "True",
      "the operator makes the pipeline Ready",
    )
    expect(JSON.parse(ready.stdout).metadata.annotations["runnel.dev/changed-by"]).toBe("github:alice")
    const runs = await kubectl(server.cwd, printed.path, "get", "runs.runnel.dev")
    expect(runs).toMatchObject({ code: 0, stderr: "No resources found in default namespace.\n" })

    // The API server in the process reads /k8s with its token too: the REST API shows what kubectl applied.
    const listed = await fetch(`${server.url}/api/pipelines`, { headers: { Authorization: `Bearer ${adminToken}` } })
    expect(((await listed.json()) as { items: { name: string }[] }).items.map((item) => item.name)).toContain("hello")

    const deleted = await kubectl(server.cwd, printed.path, "delete", "pipelines.runnel.dev", "hello")
    expect(deleted.code, deleted.stderr).toBe(0)
    const audited = await eventually(
      async () => auditEntries(server).filter((entry) => entry.pipeline === "hello"),
      (entries) => entries.length >= 2,
      "the apply and the delete are audited",
    )
    expect(audited.map(({ msg, actor }) => ({ msg, actor }))).toEqual([
      { msg: "pipeline.upsert", actor: "github:alice" },
      { msg: "pipeline.delete", actor: "github:alice" },
    ])
  })

  it("takes the token runnel login stored for the server when no --auth-token is given", async () => {
    const home = join(server.cwd, "home")
    mkdirSync(join(home, ".runnel"), { recursive: true })
    writeFileSync(
      join(home, ".runnel", "auth.config"),
      JSON.stringify({ servers: { [server.url]: { token: adminToken } } }),
      { mode: 0o600 },
    )
    const printed = await printedKubeconfig(server, "stored.kubeconfig", ["-s", server.url], { HOME: home })
    expect(printed.text).toContain(`token: ${adminToken}`)
    const listed = await kubectl(server.cwd, printed.path, "get", "pipelines.runnel.dev")
    expect(listed).toMatchObject({ code: 0, stderr: "No resources found in default namespace.\n" })
  })

  it("refuses a user who fails --k8s-admin-rbac with 403, naming the rule", async () => {
    const printed = await printedKubeconfig(server, "bob.kubeconfig", ["-s", server.url, "--auth-token", outsiderToken])
    const refused = await kubectl(server.cwd, printed.path, "get", "pipelines.runnel.dev")
    expect(refused.code).toBe(1)
    expect(refused.stderr).toContain(
      'Error from server (Forbidden): user "github:bob" is not an admin of this runnel server\'s Kubernetes API: it answers only users who match --k8s-admin-rbac',
    )
    const write = await kubectl(server.cwd, printed.path, "apply", "-f", writeManifest(server, "sneaky"))
    expect(write.code).toBe(1)
    expect(write.stderr).toContain("Forbidden")
    expect(auditEntries(server).filter((entry) => entry.pipeline === "sneaky")).toEqual([])
  })
})

describe("kubectl against /k8s under Basic Auth", () => {
  it("serves everything over HTTPS with --tls-cert-file, and answers the admin the expression names", async () => {
    const dir = servers.dir
    const authority = certificateAuthority("kubectl-access test CA")
    const certified = serverCertificate(authority, ["127.0.0.1", "localhost"])
    const files = { ca: join(dir, "ca.crt"), cert: join(dir, "tls.crt"), key: join(dir, "tls.key") }
    writeFileSync(files.ca, authority.cert)
    writeFileSync(files.cert, `${certified.cert}${authority.cert}`)
    writeFileSync(files.key, certified.key)
    const server = await servers.start([
      "--basic-auth-username",
      "admin",
      "--basic-auth-password",
      "pw",
      "--k8s-admin-rbac",
      'Provider == "basic" && NickName == "admin"',
      "--tls-cert-file",
      files.cert,
      "--tls-private-key-file",
      files.key,
    ])
    expect(server.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/)
    expect(await httpsStatus(`${server.url}/readyz`, authority.cert)).toBe(200)

    const trustingCa = { NODE_EXTRA_CA_CERTS: files.ca }
    const withPassword = server.url.replace("https://", "https://admin:pw@")
    const ls = await runnel(["pipeline", "ls", "-s", withPassword], { env: { HOME: server.cwd, ...trustingCa } })
    expect(ls, ls.stderr).toMatchObject({ code: 0 })

    const printed = await printedKubeconfig(server, "admin.kubeconfig", ["-s", withPassword], trustingCa)
    expect(printed.text).toContain(`server: ${server.url}/k8s`)
    expect(printed.text).toContain("username: admin")
    expect(printed.text).toContain("password: pw")
    expect(printed.text).toContain(`certificate-authority-data: ${Buffer.from(authority.cert).toString("base64")}`)
    const applied = await kubectl(server.cwd, printed.path, "apply", "-f", writeManifest(server, "basic-one"))
    expect(applied, applied.stderr).toMatchObject({ code: 0, stdout: "pipeline.runnel.dev/basic-one created\n" })
    await eventually(
      () => kubectl(server.cwd, printed.path, "get", "pipelines.runnel.dev", "basic-one", "-o", "json"),
      (result) => result.code === 0 && JSON.parse(result.stdout).status?.conditions?.[0]?.status === "True",
      "the operator, over HTTPS, makes the pipeline Ready",
    )
    const audited = await eventually(
      async () => auditEntries(server).filter((entry) => entry.pipeline === "basic-one"),
      (entries) => entries.length >= 1,
      "the apply is audited",
    )
    expect(audited[0]).toMatchObject({ msg: "pipeline.upsert", actor: "basic:admin" })

    const plain = await fetch(`${server.url.replace("https://", "http://")}/health`).catch((error: Error) => error)
    expect(plain).toBeInstanceOf(Error) // HTTPS only: no plain HTTP beside it
  })

  it("refuses the Basic user when the expression does not name them, and everyone without --k8s-admin-rbac", async () => {
    const basic = ["--basic-auth-username", "admin", "--basic-auth-password", "pw"]
    const failing = await servers.start([...basic, "--k8s-admin-rbac", 'NickName == "root"'])
    const withPassword = (server: ServerProcess) => server.url.replace("http://", "http://admin:pw@")
    const refusedUser = await printedKubeconfig(failing, "admin.kubeconfig", ["-s", withPassword(failing)])
    expect(refusedUser.text).toContain(`server: ${failing.url.replace("http://", "https://")}/k8s`)
    const forbidden = await kubectl(failing.cwd, refusedUser.path, "get", "pipelines.runnel.dev")
    expect(forbidden.code).toBe(1)
    expect(forbidden.stderr).toContain('Error from server (Forbidden): user "basic:admin" is not an admin')

    const unflagged = await servers.start(basic)
    const printed = await printedKubeconfig(unflagged, "admin.kubeconfig", ["-s", withPassword(unflagged)])
    const noAdmins = await kubectl(unflagged.cwd, printed.path, "get", "pipelines.runnel.dev")
    expect(noAdmins.code).toBe(1)
    expect(noAdmins.stderr).toContain(
      "Error from server (Forbidden): the Kubernetes API of this runnel server answers no user yet: start the server with --k8s-admin-rbac EXPR",
    )
    const status = await fetch(`${unflagged.url}/k8s/api`, {
      headers: { Authorization: `Basic ${Buffer.from("admin:pw").toString("base64")}` },
    })
    expect(status.status).toBe(200) // discovery answers every user who proved who they are
    const secrets = await fetch(`${unflagged.url}/k8s/api/v1/namespaces/default/secrets`, {
      headers: { Authorization: `Basic ${Buffer.from("admin:pw").toString("base64")}` },
    })
    expect(secrets.status).toBe(403)
    expect(await secrets.json()).toMatchObject({ kind: "Status", status: "Failure", reason: "Forbidden", code: 403 })
  })
})

function writeManifest(server: ServerProcess, name: string): string {
  const path = join(server.cwd, `${name}.yaml`)
  writeFileSync(path, manifest(name))
  return path
}

function httpsStatus(url: string, ca: string): Promise<number> {
  return new Promise((resolve, reject) => {
    request(url, { ca }, (res) => {
      res.resume()
      resolve(res.statusCode ?? 0)
    })
      .on("error", reject)
      .end()
  })
}

describe("starting with kubectl access, and printing a kubeconfig", () => {
  it("refuses to start with a --k8s-admin-rbac it cannot compile, or TLS files it cannot read, naming the flag", async () => {
    await expect(
      servers.start(["--basic-auth-username", "a", "--basic-auth-password", "b", "--k8s-admin-rbac", "NickName =="]),
    ).rejects.toThrow(/--k8s-admin-rbac: .*1:\d+/)
    await expect(
      servers.start([
        "--tls-cert-file",
        join(servers.dir, "missing.crt"),
        "--tls-private-key-file",
        join(servers.dir, "missing.key"),
      ]),
    ).rejects.toThrow(/cannot read --tls-cert-file ".*missing\.crt"/)
  })

  it("prints a plain-HTTP kubeconfig without credentials for a server in open access, which kubectl uses as is", async () => {
    const open = await servers.start()
    const printed = await printedKubeconfig(open, "open.kubeconfig", ["-s", open.url])
    expect(printed.text).toContain(`server: ${open.url}/k8s`)
    expect(printed.text).not.toContain("certificate-authority-data")
    expect(printed.stderr).toContain("the kubeconfig has no credentials")
    const listed = await kubectl(open.cwd, printed.path, "get", "pipelines.runnel.dev")
    expect(listed).toMatchObject({ code: 0, stderr: "No resources found in default namespace.\n" })
  })

  it("says which server it cannot reach", async () => {
    const unreachable = await runnel(["kubeconfig", "-s", "http://127.0.0.1:1"], { env: { HOME: servers.dir } })
    expect(unreachable.code).toBe(2)
    expect(unreachable.stderr).toContain("cannot reach the runnel server at http://127.0.0.1:1: ECONNREFUSED")
    expect(unreachable.stdout).toBe("")
  })
})
