import { spawn } from "node:child_process"
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { delimiter, join, resolve } from "node:path"
import {
  ApiException,
  ApiextensionsV1Api,
  ApisApi,
  CoreV1Api,
  KubeConfig,
  type V1CustomResourceDefinition,
} from "@kubernetes/client-node"
import { parseAllDocuments } from "yaml"

/**
 * The cluster the end-to-end suite runs against: the one `KUBECONFIG` names,
 * or none (the suite is then skipped). Nothing here knows whether it is kind,
 * a shared cluster or runnel's embedded API standing in for one.
 */
export const root = resolve(import.meta.dirname, "..")
export const runnelBin = join(root, "bin", "runnel")
export const crdsDir = join(root, "crds")

export const kubeconfigEnv = process.env.KUBECONFIG?.trim() || undefined
export const haveCluster = kubeconfigEnv !== undefined

export const howToRun =
  "test-e2e: KUBECONFIG is not set, so the end-to-end suite is skipped. Run it against a cluster with " +
  "`KUBECONFIG=/path/to/kubeconfig npm run e2e`, against kind + Helm with `test-e2e/kind.sh`, or against " +
  "runnel's embedded API standing in for one " +
  "(see test-e2e/README.md)."

export function clusterConfig(): KubeConfig {
  const kubeConfig = new KubeConfig()
  kubeConfig.loadFromDefault()
  return kubeConfig
}

/** A fresh namespace name of this run, so a shared cluster is left as it was found. */
export const namespaceName = (what: string) =>
  `runnel-e2e-${what}-${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`

const group = "runnel.dev"
const version = "v1alpha1"
const plurals = ["pipelines", "runs", "schedules", "gates"]

async function servedGroups(kubeConfig: KubeConfig): Promise<Set<string>> {
  const list = await kubeConfig.makeApiClient(ApisApi).getAPIVersions()
  const served = new Set<string>()
  for (const g of list.groups) for (const v of g.versions) served.add(v.groupVersion)
  return served
}

function crdsFromFiles(): V1CustomResourceDefinition[] {
  const crds: V1CustomResourceDefinition[] = []
  for (const file of readdirSync(crdsDir)
    .filter((name) => name.endsWith(".yaml"))
    .sort()) {
    for (const doc of parseAllDocuments(readFileSync(join(crdsDir, file), "utf8"))) {
      const object = doc.toJS() as V1CustomResourceDefinition | null
      if (object?.kind === "CustomResourceDefinition") crds.push(object)
    }
  }
  return crds
}

const established = (crd: V1CustomResourceDefinition) =>
  (crd.status?.conditions ?? []).some((condition) => condition.type === "Established" && condition.status === "True")

/**
 * Installs runnel's CRDs from crds/ (create, or replace what is there) and
 * waits until each is Established. An API that serves no CRD objects but
 * already serves runnel.dev/v1alpha1 (runnel's embedded API, which serves
 * crds/ built in) is left as it is. Returns what was done, for the log.
 */
export async function ensureCrds(kubeConfig: KubeConfig): Promise<string> {
  const served = await servedGroups(kubeConfig)
  if (!served.has("apiextensions.k8s.io/v1")) {
    if (served.has(`${group}/${version}`)) return `the API serves ${group}/${version} already; CRDs not applied`
    throw new Error(`the API serves neither CustomResourceDefinitions nor ${group}/${version}; cannot install runnel`)
  }
  const extensions = kubeConfig.makeApiClient(ApiextensionsV1Api)
  const crds = crdsFromFiles()
  for (const crd of crds) {
    const name = crd.metadata?.name ?? ""
    try {
      await extensions.createCustomResourceDefinition({ body: crd })
    } catch (error) {
      if (!(error instanceof ApiException) || error.code !== 409) throw error
      const current = await extensions.readCustomResourceDefinition({ name })
      await extensions.replaceCustomResourceDefinition({
        name,
        body: { ...crd, metadata: { ...crd.metadata, resourceVersion: current.metadata?.resourceVersion } },
      })
    }
  }
  const deadline = Date.now() + 60_000
  for (const crd of crds) {
    const name = crd.metadata?.name ?? ""
    while (!established(await extensions.readCustomResourceDefinition({ name }))) {
      if (Date.now() > deadline) throw new Error(`CRD ${name} is not Established after 60 s`)
      await new Promise((done) => setTimeout(done, 250))
    }
  }
  return `applied ${crds.length} CRDs from crds/ (${plurals.join(", ")}) and they are Established`
}

/** One kubeconfig file for `runnel server --kubeconfig`: KUBECONFIG itself, or its files merged when it lists several. */
export function singleKubeconfigFile(write: (text: string) => string): string {
  const files = (kubeconfigEnv ?? "").split(delimiter).filter(Boolean)
  if (files.length === 1 && files[0] !== undefined) return files[0]
  return write(clusterConfig().exportConfig())
}

/** Waits until `holds(read())`, as any client of a real cluster must for what controllers do. */
export async function eventually<T>(
  read: () => Promise<T>,
  holds: (value: T) => boolean,
  what: string,
  timeoutMs = 60_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await read()
    if (holds(value)) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}; last: ${JSON.stringify(value)}`)
    await new Promise((done) => setTimeout(done, 100))
  }
}

/** A `runnel server` on this machine reconciling a namespace of the cluster, made for it and deleted by stop(). */
export type E2eServer = {
  readonly url: string
  /** What the server wrote to stderr so far. */
  stderr(): string
  stop(): Promise<void>
}

/**
 * Makes the namespace, starts `bin/runnel server --kubeconfig <KUBECONFIG> --namespace <it> --port 0` with
 * `args` and its stores in a temp directory, and resolves once it listens.
 */
export async function startServer(namespace: string, args: readonly string[]): Promise<E2eServer> {
  const dir = mkdtempSync(join(tmpdir(), "runnel-e2e-"))
  const core = clusterConfig().makeApiClient(CoreV1Api)
  await core.createNamespace({
    body: { metadata: { name: namespace, labels: { "app.kubernetes.io/part-of": "runnel-e2e" } } },
  })
  const kubeconfig = singleKubeconfigFile((text) => {
    const file = join(dir, "kubeconfig.yaml")
    writeFileSync(file, text, { mode: 0o600 })
    return file
  })
  const child = spawn(
    runnelBin,
    [
      "server",
      ...["--kubeconfig", kubeconfig, "--namespace", namespace, "--port", "0", "--shutdown-grace", "1s"],
      ...["--storage-sqlite-path", join(dir, "runnel.db"), "--secrets-sqlite-path", join(dir, "secrets.db")],
      ...args,
    ],
    { cwd: root, stdio: ["ignore", "pipe", "pipe"] },
  )
  const exited = new Promise<number | string>((done) => child.on("exit", (code, signal) => done(code ?? signal ?? -1)))
  let stderr = ""
  child.stderr.setEncoding("utf8").on("data", (text: string) => {
    stderr += text
  })
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM")
      const killer = setTimeout(() => child.kill("SIGKILL"), 15_000)
      await exited
      clearTimeout(killer)
    }
    await core.deleteNamespace({ name: namespace }).catch(() => undefined)
    rmSync(dir, { recursive: true, force: true })
  }
  try {
    const url = await new Promise<string>((done, fail) => {
      let stdout = ""
      const timer = setTimeout(
        () => fail(new Error(`runnel server did not listen within 30 s; stderr: ${stderr}`)),
        30_000,
      )
      child.stdout.setEncoding("utf8").on("data", (text: string) => {
        stdout += text
        const listening = /listening on (http\S+)/.exec(stdout)
        if (listening?.[1] !== undefined) {
          clearTimeout(timer)
          done(listening[1])
        }
      })
      void exited.then((code) => fail(new Error(`runnel server exited (${code}) before listening: ${stderr}`)))
    })
    return { url, stderr: () => stderr, stop }
  } catch (error) {
    await stop()
    throw error
  }
}
