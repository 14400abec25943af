import { join } from "node:path"
import { CoreV1Api, CustomObjectsApi } from "@kubernetes/client-node"
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest"
import { type RunningApi, startEmbeddedApi } from "../../kubeserver/embedded-api.fixture.ts"
import { loadCrds } from "../../kubeserver/resource-types.ts"
import { globalScope, pipelineScope, resolverFor } from "../secrets/secret-store.ts"
import { secretStoreContract } from "../secrets/secret-store-contract.fixture.ts"
import { maxKubernetesKeyChars, openKubernetesSecretStore, pipelineSecretsLabel } from "./kubernetes-secret-store.ts"

// The Kubernetes Secrets backend against the embedded API, through the client the operator uses.
let running: RunningApi
beforeAll(async () => {
  running = await startEmbeddedApi({ crds: loadCrds(join(import.meta.dirname, "..", "..", "crds")) })
})
afterAll(() => running.close())

let namespaces = 0
/** Each store in a namespace of its own, created here: an empty backend. */
async function freshNamespace(): Promise<string> {
  const name = `secrets-${++namespaces}`
  await running.kubeConfig.makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name } } })
  return name
}

secretStoreContract(
  "Kubernetes Secrets (embedded API)",
  async () =>
    openKubernetesSecretStore({
      kubeConfig: running.kubeConfig,
      namespace: await freshNamespace(),
      globalSecret: "runnel-secrets",
    }),
  { longestKeyStored: maxKubernetesKeyChars },
)

describe("Kubernetes Secrets backend", () => {
  const b64 = (text: string) => Buffer.from(text).toString("base64")

  async function withPipeline(name: string) {
    const namespace = await freshNamespace()
    const objects = running.kubeConfig.makeApiClient(CustomObjectsApi)
    const pipeline = (await objects.createNamespacedCustomObject({
      group: "runnel.dev",
      version: "v1alpha1",
      namespace,
      plural: "pipelines",
      body: { apiVersion: "runnel.dev/v1alpha1", kind: "Pipeline", metadata: { name }, spec: { content: "x" } },
    })) as { metadata: { uid: string; name: string } }
    const store = openKubernetesSecretStore({ kubeConfig: running.kubeConfig, namespace, globalSecret: "team-global" })
    onTestFinished(() => store.close())
    return { namespace, pipeline, store, core: running.kubeConfig.makeApiClient(CoreV1Api) }
  }

  it("reads the keys of the global Secret and of Secrets labelled with the pipeline's name, the pipeline's first", async () => {
    const { namespace, pipeline, store, core } = await withPipeline("deploy")
    await core.createNamespacedSecret({
      namespace,
      body: { metadata: { name: "team-global" }, data: { TOKEN: b64("global-token"), REGION: b64("eu-west-1") } },
    })
    await core.createNamespacedSecret({
      namespace,
      body: {
        metadata: { name: "from-external-secrets", labels: { [pipelineSecretsLabel]: "deploy" } },
        data: { TOKEN: b64("pipeline-token") },
      },
    })
    const scope = pipelineScope(pipeline.metadata.uid)
    expect(await store.keys(scope)).toEqual(["TOKEN"])
    const secrets = resolverFor(store, [scope, globalScope])
    expect(await secrets.get("TOKEN")).toBe("pipeline-token")
    expect(await secrets.get("REGION")).toBe("eu-west-1")
    expect([...(await secrets.values())].sort()).toEqual(["eu-west-1", "global-token", "pipeline-token"])
  })

  it("refuses a key longer than a Secret can hold, writing none of the entries", async () => {
    const { pipeline, store } = await withPipeline("long")
    const scope = pipelineScope(pipeline.metadata.uid)
    await expect(store.set(scope, { OK: "v", ["K".repeat(254)]: "v" })).rejects.toThrow(
      expect.objectContaining({
        status: 400,
        message: expect.stringContaining("too long for a Kubernetes Secret: at most 253"),
      }),
    )
    expect(await store.keys(scope)).toEqual([])
  })

  it("writes a pipeline's secrets to a Secret owned by the Pipeline and labelled with its name", async () => {
    const { namespace, pipeline, store, core } = await withPipeline("owned")
    await store.set(pipelineScope(pipeline.metadata.uid), { API_KEY: "key-value-1" })
    const written = await core.readNamespacedSecret({ name: `runnel-secrets-${pipeline.metadata.uid}`, namespace })
    expect(written.metadata?.labels?.[pipelineSecretsLabel]).toBe("owned")
    expect(written.metadata?.ownerReferences).toEqual([
      expect.objectContaining({ kind: "Pipeline", name: "owned", uid: pipeline.metadata.uid }),
    ])
    expect(Buffer.from(written.data?.API_KEY ?? "", "base64").toString()).toBe("key-value-1")
  })

  it("refuses a key that is not an environment variable name, naming the Secret and the key, and keeps it", async () => {
    const { namespace, pipeline, store, core } = await withPipeline("tls")
    await core.createNamespacedSecret({
      namespace,
      body: {
        metadata: { name: "tls-pair", labels: { [pipelineSecretsLabel]: "tls" } },
        data: { "tls.crt": b64("cert"), GOOD: b64("good") },
      },
    })
    const scope = pipelineScope(pipeline.metadata.uid)
    await expect(store.values(scope)).rejects.toThrow(
      `Secret "tls-pair" in namespace "${namespace}" has the key "tls.crt", which is not a valid environment variable name`,
    )
    expect(await store.get(scope, "GOOD")).toBe("good")
    expect((await core.readNamespacedSecret({ name: "tls-pair", namespace })).data?.["tls.crt"]).toBe(b64("cert"))
  })
})
