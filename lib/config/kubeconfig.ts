import { existsSync } from "node:fs"
import { delimiter, join } from "node:path"
import { badRequest } from "../core/errors.ts"
import type { HostEnvironment } from "./flags.ts"

/** The commands that talk to a Kubernetes API. */
export type KubeRole = "server" | "operator" | "apiserver" | "schedule fire"

/** Where a role's Kubernetes API is, decided once from its flags and environment by kubeSource(). */
export type KubeSource =
  /** Kubeconfig files (several only from a `KUBECONFIG` list, merged as kubectl merges them); `from` names them in messages. */
  | { readonly kind: "files"; readonly files: readonly string[]; readonly from: string }
  /** The service account of the Pod the process runs in. */
  | { readonly kind: "in-cluster" }
  /** `runnel server`'s own embedded API, reached in-process (cli/in-process-transport.ts) once the server listens. */
  | { readonly kind: "embedded" }

/**
 * The one policy for finding the Kubernetes API, for every role:
 * 1. `--kubeconfig FILE` (or `CI_KUBECONFIG`).
 * 2. The roles that run apart, `operator` and `apiserver`, then take kubectl's
 *    choice: `$KUBECONFIG`, else `~/.kube/config` when it exists. `runnel
 *    server` does not look there: a kubectl context left pointing at some
 *    cluster must not turn a one-machine server into that cluster's operator.
 * 3. In a Pod (`KUBERNETES_SERVICE_HOST` set): the Pod's service account.
 * 4. `runnel server` serves its embedded API; the other roles fail, saying what to pass.
 */
export function kubeSource(role: KubeRole, flag: string | undefined, host: HostEnvironment): KubeSource {
  if (flag !== undefined) return { kind: "files", files: [flag], from: `--kubeconfig "${flag}"` }
  if (role !== "server") {
    const listed = (host.kubeconfig ?? "").split(delimiter).filter((file) => file !== "")
    if (listed.length > 0) return { kind: "files", files: listed, from: `$KUBECONFIG "${host.kubeconfig}"` }
    const home = join(host.home, ".kube", "config")
    if (existsSync(home)) return { kind: "files", files: [home], from: `"${home}"` }
  }
  if (host.inCluster) return { kind: "in-cluster" }
  if (role === "server") return { kind: "embedded" }
  throw badRequest(
    `runnel ${role} needs a Kubernetes API: pass --kubeconfig FILE (or set KUBECONFIG) outside a cluster, or run it in a Pod; \`runnel server\` serves one of its own`,
  )
}
