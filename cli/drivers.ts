import { tmpdir } from "node:os"
import { join } from "node:path"
import { hostEnvironment } from "../lib/config/flags.ts"
import { registry } from "../lib/core/registry.ts"
import { dockerDriverFactory } from "../operator/drivers/docker/docker-driver.ts"
import { nativeDriverFactory } from "../operator/drivers/native/native-driver.ts"

/** The composition point that names every driver; the kubernetes driver joins this list. */
export function driverRegistry(env = hostEnvironment()) {
  return registry("driver", [
    dockerDriverFactory({ host: env.dockerHost }),
    nativeDriverFactory({ workRoot: join(tmpdir(), "runnel"), path: env.path }),
  ])
}
