import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { createEmbeddedApi } from "../kubeserver/embedded-api.ts"
import { loadCrds } from "../kubeserver/resource-types.ts"

// runnel's embedded Kubernetes-compatible API alone, standing in for a cluster so the end-to-end suite can be
// shown to run where no cluster exists:
//
//   node_modules/.bin/node test-e2e/embedded-cluster.ts [PORT] > /tmp/embedded-kubeconfig-path &
//   KUBECONFIG=$(head -1 /tmp/embedded-kubeconfig-path) npm run e2e
//
// It serves runnel's CRDs from crds/ on a temp SQLite file, writes a kubeconfig file pointing at itself,
// prints that file's path on stdout, and runs until SIGTERM or SIGINT, then removes its directory.
const port = Number(process.argv[2] ?? "0")
const dir = mkdtempSync(join(tmpdir(), "runnel-embedded-cluster-"))
const api = createEmbeddedApi({
  db: join(dir, "kube.db"),
  crds: loadCrds(resolve(import.meta.dirname, "..", "crds")),
  prefix: "/k8s",
})
const http = createServer((req, res) => {
  if (!api.handle(req, res)) {
    res.writeHead(404)
    res.end()
  }
})
await new Promise<void>((done) => http.listen(port, "127.0.0.1", done))
const server = `http://127.0.0.1:${(http.address() as AddressInfo).port}/k8s`
const kubeconfig = join(dir, "kubeconfig.yaml")
// client-node speaks plain http only with TLS verification off.
writeFileSync(
  kubeconfig,
  `apiVersion: v1
kind: Config
clusters:
  - name: runnel-embedded
    cluster: { server: "${server}", insecure-skip-tls-verify: true }
users:
  - name: runnel-embedded
    user: {}
contexts:
  - name: runnel-embedded
    context: { cluster: runnel-embedded, user: runnel-embedded, namespace: default }
current-context: runnel-embedded
`,
)
process.stdout.write(`${kubeconfig}\n`)
process.stderr.write(`embedded API at ${server}; SIGTERM or Ctrl-C stops it\n`)

const stop = () => {
  http.closeAllConnections()
  http.close(() => {
    api.close()
    rmSync(dir, { recursive: true, force: true })
    process.exit(0)
  })
}
process.once("SIGTERM", stop)
process.once("SIGINT", stop)
