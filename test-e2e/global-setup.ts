import { clusterConfig, ensureCrds, haveCluster, howToRun } from "./cluster.ts"

/** Once per `npm run e2e`: say how to run the suite when there is no cluster, or install runnel's CRDs in it. */
export default async function setup(): Promise<void> {
  if (!haveCluster) {
    console.warn(`\n${howToRun}\n`)
    return
  }
  console.log(`test-e2e: ${await ensureCrds(clusterConfig())}`)
}
