import type { KubeSource } from "../lib/config/kubeconfig.ts"
import { badRequest, errorMessage } from "../lib/core/errors.ts"
import { KubeConfig } from "../lib/kube/client-node.js"

/** How `runnel server`'s own roles reach its embedded API: its URL (known once it listens) and the process's token. */
export type EmbeddedAccess = { readonly server: string; readonly token: string }

/**
 * The client configuration of the Kubernetes API that lib/config's kubeSource()
 * chose. `embedded` is how to reach the embedded API (for `runnel server`).
 * Only the commands that talk to Kubernetes import this module, and with it
 * client-node (about 0.4 s and 80 MB to load).
 */
export function loadKubeConfig(source: KubeSource, embedded?: EmbeddedAccess): KubeConfig {
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
      if (embedded === undefined) throw new Error("the embedded API's URL is needed to reach it")
      kubeConfig.loadFromOptions({
        // client-node refuses plain http unless TLS verification is off. Over loopback, TLS (when the server
        // serves only HTTPS) is not verified either: the certificate names the server's public names, and
        // nothing but this machine sits between the process and itself.
        clusters: [{ name: "embedded", server: embedded.server, skipTLSVerify: true }],
        users: [{ name: "runnel", token: embedded.token }],
        contexts: [{ name: "embedded", cluster: "embedded", user: "runnel", namespace: "default" }],
        currentContext: "embedded",
      })
      break
  }
  return kubeConfig
}
