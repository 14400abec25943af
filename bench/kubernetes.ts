import { join } from "node:path"
import { startEmbeddedApi } from "../kubeserver/embedded-api.fixture.ts"
import { loadCrds } from "../kubeserver/resource-types.ts"
import { hostEnvironment } from "../lib/config/flags.ts"
import type { Driver } from "../operator/drivers/driver.ts"
import { kubernetesDriverFactory } from "../operator/drivers/kubernetes/kubernetes-driver.ts"

/** Runs `work` with the kubernetes driver on a fresh embedded API (real HTTP on loopback) whose Pods run in Docker. */
export async function withKubernetesDriver(work: (driver: Driver) => Promise<void>): Promise<void> {
  const dockerHost = hostEnvironment(process.env).dockerHost
  const running = await startEmbeddedApi({
    crds: loadCrds(join(import.meta.dirname, "..", "crds")),
    ...(dockerHost === undefined ? {} : { dockerHost }),
  })
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
