import { tmpdir } from "node:os"
import { join } from "node:path"
import type { HostEnvironment } from "../lib/config/flags.ts"
import type { TaskVolumeSettings } from "../lib/config/operator.ts"
import { badRequest } from "../lib/core/errors.ts"
import { registry } from "../lib/core/registry.ts"
import type { KubeConfig } from "../lib/kube/client-node.js"
import type { DriverFactory } from "../operator/drivers/driver.ts"

/** A driver by name, imported on first use: dockerode alone takes about 0.1 s to import, and `--driver native` never needs it. */
export type DriverEntry = {
  readonly name: string
  /** `kube`: the Kubernetes API and namespace the operator reconciles, which the kubernetes driver runs Pods in. */
  load(host: Pick<HostEnvironment, "dockerHost" | "path">, kube?: KubeTarget): Promise<DriverFactory>
}

export type KubeTarget = {
  readonly kubeConfig: KubeConfig
  readonly namespace: string
  /** `--task-volume-*`: the claims of a run's volumes and caches. */
  readonly taskVolumes: TaskVolumeSettings
}

/** The composition point that names every driver. */
export const drivers = registry<DriverEntry>("driver", [
  {
    name: "docker",
    load: async (host) =>
      (await import("../operator/drivers/docker/docker-driver.ts")).dockerDriverFactory({ host: host.dockerHost }),
  },
  {
    name: "native",
    load: async (host) =>
      (await import("../operator/drivers/native/native-driver.ts")).nativeDriverFactory({
        workRoot: join(tmpdir(), "runnel"),
        path: host.path,
      }),
  },
  {
    name: "kubernetes",
    load: async (_, kube) => {
      if (kube === undefined) {
        throw badRequest(
          "the kubernetes driver runs tasks as Pods of runnel server's or runnel operator's Kubernetes API; use --driver docker or native here",
        )
      }
      return (await import("../operator/drivers/kubernetes/kubernetes-driver.ts")).kubernetesDriverFactory({
        kubeConfig: kube.kubeConfig,
        namespace: kube.namespace,
        storageClass: kube.taskVolumes.storageClass,
        volumeSize: kube.taskVolumes.size,
        accessMode: kube.taskVolumes.accessMode,
        unschedulableTimeoutMs: 5 * 60_000,
      })
    },
  },
])
