import { tmpdir } from "node:os"
import { join } from "node:path"
import type { HostEnvironment } from "../lib/config/flags.ts"
import { registry } from "../lib/core/registry.ts"
import type { DriverFactory } from "../operator/drivers/driver.ts"

/** A driver by name, imported on first use: dockerode alone takes about 0.1 s to import, and `--driver native` never needs it. */
export type DriverEntry = {
  readonly name: string
  load(host: Pick<HostEnvironment, "dockerHost" | "path">): Promise<DriverFactory>
}

/** The composition point that names every driver; the kubernetes driver joins this list. */
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
])
