import { KubeConfig } from "@kubernetes/client-node"
import type { KubeSource } from "../lib/config/kubeconfig.ts"
import { badRequest, errorMessage } from "../lib/core/errors.ts"

/**
 * The client configuration of the Kubernetes API that lib/config's kubeSource()
 * chose. `embeddedServer` is the URL of the embedded API (for `runnel server`,
 * known once it listens). Only the commands that talk to Kubernetes import this
 * module, and with it client-node (about 0.4 s and 80 MB to load).
 */
export function loadKubeConfig(source: KubeSource, embeddedServer?: string): KubeConfig {
  const kubeConfig = new KubeConfig()
  switch (source.kind) {
    case "files":
      try {
        const [first = "", ...rest] = source.files
        kubeConfig.loadFromFile(first)
        for (const file of rest) {
          const more = new KubeConfig()
          more.loadFromFile(file)
          kubeConfig.mergeConfig(more)
        }
      } catch (error) {
        throw badRequest(`cannot load the kubeconfig ${source.from}: ${errorMessage(error)}`)
      }
      break
    case "in-cluster":
      kubeConfig.loadFromCluster()
      break
    case "embedded":
      if (embeddedServer === undefined) throw new Error("the embedded API's URL is needed to reach it")
      kubeConfig.loadFromOptions({
        // client-node refuses plain http unless TLS verification is off; loopback carries no TLS.
        clusters: [{ name: "embedded", server: embeddedServer, skipTLSVerify: true }],
        users: [{ name: "runnel" }],
        contexts: [{ name: "embedded", cluster: "embedded", user: "runnel", namespace: "default" }],
        currentContext: "embedded",
      })
      break
  }
  return kubeConfig
}
