import { createHash } from "node:crypto"
import { afterAll, describe, expect, it } from "vitest"
import { call, kubectl, kubectlWithInput, runToEnd, serverProcesses } from "./server-process.ts"

// `runnel server --secrets-backend kubernetes` on its embedded API: secrets kept as core Secrets, applied
// with kubectl as External Secrets or Sealed Secrets would, resolved into a run and redacted.
const servers = serverProcesses("runnel-kubernetes-secrets-test-")
afterAll(() => servers.cleanUp())

const sha = (text: string) => createHash("sha256").update(text).digest("hex")
const globalValue = "global-from-kubectl-6e2b"
const pipelineValue = "pipeline-from-kubectl-91ac"
const apiValue = "set-over-rest-3f0d"

const content = `export const pipeline = async () => {
  await runtime.run({
    name: "show",
    image: "busybox",
    command: { path: "sh", args: ["-c", "echo own=$OWN global=$GLOBAL api=$API; printf %s \\"$OWN$GLOBAL$API\\" | sha256sum"] },
    env: { OWN: "secret:DEPLOY_TOKEN", GLOBAL: "secret:REGISTRY_TOKEN", API: "secret:API_TOKEN" },
  })
}
`

const secretYaml = (name: string, labels: string, key: string, value: string) => `apiVersion: v1
kind: Secret
metadata:
  name: ${name}
${labels}stringData:
  ${key}: ${value}
`

describe("secrets kept as Kubernetes Secrets", () => {
  it("resolve from Secrets applied with kubectl and from the REST API, redacted; REST writes an owned Secret", async () => {
    const server = await servers.start(["--secrets-backend", "kubernetes"])
    await kubectlWithInput(server, secretYaml("runnel-secrets", "", "REGISTRY_TOKEN", globalValue), "apply", "-f", "-")
    await kubectlWithInput(
      server,
      secretYaml(
        "deploy-tokens",
        "  labels:\n    runnel.dev/pipeline-secrets: deploy\n",
        "DEPLOY_TOKEN",
        pipelineValue,
      ),
      "apply",
      "-f",
      "-",
    )
    const put = await call(server.url, "PUT", "/api/pipelines/deploy", { content, secrets: { API_TOKEN: apiValue } })
    expect(put.status).toBe(201)
    expect((await call(server.url, "GET", "/api/pipelines/deploy/secrets")).body).toEqual({
      keys: ["API_TOKEN", "DEPLOY_TOKEN"],
    })

    const { run, tasks } = await runToEnd(server.url, "deploy")
    expect(run).toMatchObject({ status: "success" })
    expect(tasks[0].stdout).toBe(
      `own=***REDACTED*** global=***REDACTED*** api=***REDACTED***\n${sha(pipelineValue + globalValue + apiValue)}  -\n`,
    )

    const written = JSON.parse(await kubectl(server, "get", "secret", `runnel-secrets-${put.body.id}`, "-o", "json"))
    expect(written.metadata.ownerReferences).toEqual([
      expect.objectContaining({ kind: "Pipeline", name: "deploy", uid: put.body.id }),
    ])
    expect(written.metadata.labels["runnel.dev/pipeline-secrets"]).toBe("deploy")
  }, 90_000)

  it("fail the run with a clear error for a Secret key that is not an environment variable name", async () => {
    const server = await servers.start(["--secrets-backend", "kubernetes"])
    await kubectlWithInput(
      server,
      secretYaml("certs", "  labels:\n    runnel.dev/pipeline-secrets: tls\n", "tls.crt", "cert-data"),
      "apply",
      "-f",
      "-",
    )
    await call(server.url, "PUT", "/api/pipelines/tls", { content })
    const { run } = await runToEnd(server.url, "tls")
    expect(run.status).toBe("error")
    expect(run.error_message).toMatch(
      /Secret "certs" in namespace "default" has the key "tls.crt", which is not a valid environment variable name/,
    )
    // Nothing lost: the Secret is as it was applied.
    expect(await kubectl(server, "get", "secret", "certs", "-o", "jsonpath={.data.tls\\.crt}")).toBe(
      Buffer.from("cert-data").toString("base64"),
    )
  }, 60_000)
})
