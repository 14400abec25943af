import { join } from "node:path"
import { inProcessTransport } from "../cli/in-process-transport.ts"
import { startEmbeddedApi } from "../kubeserver/embedded-api.fixture.ts"
import { loadCrds } from "../kubeserver/resource-types.ts"
import { hostEnvironment } from "../lib/config/flags.ts"
import type { Driver } from "../operator/drivers/driver.ts"
import { kubernetesDriverFactory } from "../operator/drivers/kubernetes/kubernetes-driver.ts"

/**
 * Runs `work` with the kubernetes driver on a fresh embedded API whose Pods run in Docker, reached as
 * `runnel server --driver kubernetes` reaches it: API calls through the in-process transport, Pod logs over
 * loopback HTTP.
 */
export async function withKubernetesDriver(work: (driver: Driver) => Promise<void>): Promise<void> {
  const dockerHost = hostEnvironment(process.env).dockerHost
  const running = await startEmbeddedApi({
    crds: loadCrds(join(import.meta.dirname, "..", "crds")),
    ...(dockerHost === undefined ? {} : { dockerHost }),
  })
  inProcessTransport(running.kubeConfig, "bench", running.api.handle)
  const driver = kubernetesDriverFactory({
    kubeConfig: running.kubeConfig,
    namespace: "default",
    volumeSize: "1Gi",
    accessMode: "ReadWriteOnce",
    unschedulableTimeoutMs: 60_000,
  }).create({})
  try {
    await work(driver)
  } finally {
    await driver.close()
    await running.close()
  }
}
