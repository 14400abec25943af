import { it } from "vitest"
import { kubeApiContract, kubePodContract } from "../lib/kube/kube-api-contract.fixture.ts"
import { clusterConfig, haveCluster } from "./cluster.ts"

// The shared contract every Kubernetes API runnel talks to must pass, here against the cluster of KUBECONFIG
// (global-setup.ts installed runnel's CRDs). The contract makes and deletes a namespace of its own.
if (haveCluster) {
  kubeApiContract("the cluster's", async () => ({ kubeConfig: clusterConfig(), close: async () => {} }))
  // Pods as the cluster's scheduler and kubelets run them; busybox is pulled from the cluster's registry.
  kubePodContract("the cluster's", async () => ({ kubeConfig: clusterConfig(), close: async () => {} }))
} else {
  it.skip("the Kubernetes API contract against the cluster of KUBECONFIG (KUBECONFIG is not set)", () => {})
}
