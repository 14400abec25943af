import { badRequest, SystemError } from "../core/errors.ts"
import { assertSecretScope, checkedEntries, globalScope, type SecretStore } from "../secrets/secret-store.ts"
import { CoreV1Api, type KubeConfig, type V1Secret } from "./client-node.js"
import { ifGone, ResourceClient } from "./resource-client.ts"
import { type PipelineObject, pipelineOwnerReference } from "./resources.ts"

/** The label that makes a core Secret's keys a pipeline's secrets; its value is the Pipeline's name. */
export const pipelineSecretsLabel = "runnel.dev/pipeline-secrets"
/** The label of the Secret runnel writes a pipeline's secrets to; its value is the Pipeline's uid. */
const pipelineUidLabel = "runnel.dev/pipeline-uid"

export type KubernetesSecretStoreOptions = {
  readonly kubeConfig: KubeConfig
  /** The release's namespace: the only one read or written. */
  readonly namespace: string
  /** The core Secret whose keys are the global secrets. */
  readonly globalSecret: string
}

/**
 * Secrets kept as core Secrets, where teams that run runnel in a cluster
 * already keep them (External Secrets, Sealed Secrets, a vault injector):
 * - global: the keys of the Secret `globalSecret`;
 * - a pipeline's: the keys of every Secret labelled `runnel.dev/pipeline-secrets: <pipeline name>`
 *   (a Secret owned by another Pipeline of that name, an old one awaiting garbage collection, is not
 *   read), and of the one runnel writes, `runnel-secrets-<pipeline uid>`, owned by the Pipeline so
 *   that it goes with it;
 * - a run's own global secrets: `runnel-run-secrets-<run id>`.
 * Values rest as the API server keeps Secrets (encrypted at rest when it is configured so; the
 * embedded API always seals them). A key that is not an environment variable name fails clearly.
 */
export function openKubernetesSecretStore(options: KubernetesSecretStoreOptions): SecretStore {
  return new KubernetesSecretStore(options)
}

const runSecretName = (id: string) => `runnel-run-secrets-${id}`
const pipelineSecretName = (uid: string) => `runnel-secrets-${uid.toLowerCase()}`
const envNamePattern = /^[A-Za-z_][A-Za-z0-9_]*$/
/** Kubernetes refuses longer keys in a Secret's data (a DNS subdomain's length), where runnel allows 256. */
export const maxKubernetesKeyChars = 253

class KubernetesSecretStore implements SecretStore {
  readonly #core: CoreV1Api
  readonly #resources: ResourceClient
  readonly #namespace: string
  readonly #globalSecret: string
  #closed = false

  constructor(options: KubernetesSecretStoreOptions) {
    this.#core = options.kubeConfig.makeApiClient(CoreV1Api)
    this.#resources = new ResourceClient(options.kubeConfig, options.namespace)
    this.#namespace = options.namespace
    this.#globalSecret = options.globalSecret
  }

  async set(scope: string, entries: Readonly<Record<string, string>>): Promise<void> {
    this.#assertOpen()
    const pairs = checkedEntries(scope, entries)
    for (const [key] of pairs) {
      if (key.length > maxKubernetesKeyChars) {
        throw badRequest(
          `secret name "${key.slice(0, 32)}…" is too long for a Kubernetes Secret: at most ${maxKubernetesKeyChars} characters`,
        )
      }
    }
    if (pairs.length === 0) return
    const target = await this.#writeTarget(scope)
    const data = Object.fromEntries(pairs.map(([key, value]) => [key, Buffer.from(value, "utf8").toString("base64")]))
    const namespace = this.#namespace
    const existing = await ifGone(this.#core.readNamespacedSecret({ name: target.name, namespace }))
    if (existing === undefined) {
      await this.#core.createNamespacedSecret({
        namespace,
        body: { apiVersion: "v1", kind: "Secret", type: "Opaque", metadata: target.metadata, data },
      })
      return
    }
    // One replace with the resourceVersion read: all entries or none, and a concurrent write is a 409, not lost.
    await this.#core.replaceNamespacedSecret({
      name: target.name,
      namespace,
      body: { ...existing, data: { ...existing.data, ...data } },
    })
  }

  async get(scope: string, key: string): Promise<string | undefined> {
    this.#assertOpen()
    assertSecretScope(scope)
    for (const secret of await this.#secretsOf(scope)) {
      const data = secret.data?.[key]
      if (data !== undefined) return Buffer.from(data, "base64").toString("utf8")
    }
    return undefined
  }

  async keys(scope: string): Promise<string[]> {
    return [...(await this.#entries(scope)).keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
  }

  async delete(scope: string, key: string): Promise<boolean> {
    this.#assertOpen()
    assertSecretScope(scope)
    let found = false
    for (const secret of await this.#secretsOf(scope)) {
      if (secret.data?.[key] === undefined) continue
      const data = { ...secret.data }
      delete data[key]
      await this.#core.replaceNamespacedSecret({
        name: secret.metadata?.name ?? "",
        namespace: this.#namespace,
        body: { ...secret, data },
      })
      found = true
    }
    return found
  }

  /** Removes each key of the scope from the Secret that holds it; the Secrets themselves stay (others may manage them). */
  async deleteScope(scope: string): Promise<number> {
    const count = (await this.#entries(scope)).size
    for (const key of await this.keys(scope)) await this.delete(scope, key)
    return count
  }

  async values(scope: string): Promise<string[]> {
    return [...(await this.#entries(scope)).values()]
  }

  async close(): Promise<void> {
    this.#closed = true
  }

  /** Every key and value of the scope, the first Secret by name winning a key two of them hold. */
  async #entries(scope: string): Promise<Map<string, string>> {
    this.#assertOpen()
    assertSecretScope(scope)
    const entries = new Map<string, string>()
    for (const secret of await this.#secretsOf(scope)) {
      for (const [key, data] of Object.entries(secret.data ?? {})) {
        if (!envNamePattern.test(key)) {
          throw new SystemError(
            `Secret "${secret.metadata?.name}" in namespace "${this.#namespace}" has the key "${key}", which is not a valid environment variable name (letters, digits and "_", not starting with a digit); rename the key, or keep it in another Secret`,
          )
        }
        if (!entries.has(key)) entries.set(key, Buffer.from(data, "base64").toString("utf8"))
      }
    }
    return entries
  }

  /** The Secrets whose keys are the scope's, sorted by name. */
  async #secretsOf(scope: string): Promise<V1Secret[]> {
    const namespace = this.#namespace
    if (scope === globalScope || scope.startsWith("run:")) {
      const name = scope === globalScope ? this.#globalSecret : runSecretName(scope.slice("run:".length))
      const secret = await ifGone(this.#core.readNamespacedSecret({ name, namespace }))
      return secret === undefined ? [] : [secret]
    }
    const uid = scope.slice("pipeline:".length)
    const own = await this.#core.listNamespacedSecret({ namespace, labelSelector: `${pipelineUidLabel}=${uid}` })
    const pipeline = await this.#pipeline(uid)
    const labelled =
      pipeline === undefined
        ? []
        : (
            await this.#core.listNamespacedSecret({
              namespace,
              labelSelector: `${pipelineSecretsLabel}=${pipeline.metadata?.name}`,
            })
          ).items
    const byName = new Map<string, V1Secret>()
    for (const secret of [...own.items, ...labelled]) {
      const owners = secret.metadata?.ownerReferences ?? []
      if (owners.some((owner) => owner.kind === "Pipeline" && owner.uid !== uid)) continue
      byName.set(secret.metadata?.name ?? "", secret)
    }
    return [...byName.keys()].sort().map((name) => byName.get(name) as V1Secret)
  }

  /** The Secret a write to the scope goes to, and its metadata when it has to be created. */
  async #writeTarget(scope: string): Promise<{ name: string; metadata: V1Secret["metadata"] }> {
    if (scope === globalScope) return { name: this.#globalSecret, metadata: { name: this.#globalSecret } }
    if (scope.startsWith("run:")) {
      const name = runSecretName(scope.slice("run:".length))
      return { name, metadata: { name } }
    }
    const uid = scope.slice("pipeline:".length)
    const name = pipelineSecretName(uid)
    const pipeline = await this.#pipeline(uid)
    const labels: Record<string, string> = { [pipelineUidLabel]: uid }
    if (pipeline === undefined) return { name, metadata: { name, labels } }
    labels[pipelineSecretsLabel] = pipeline.metadata?.name ?? ""
    return { name, metadata: { name, labels, ownerReferences: [pipelineOwnerReference(pipeline)] } }
  }

  async #pipeline(uid: string): Promise<PipelineObject | undefined> {
    const list = await this.#resources.list<PipelineObject>("pipelines")
    return list.items.find((pipeline) => pipeline.metadata?.uid === uid)
  }

  #assertOpen(): void {
    if (this.#closed) throw new Error("the secret store is closed")
  }
}
