// What runnel's own code takes from @kubernetes/client-node, the one place it imports the package from.
// `npm install` bundles the values named here into client-node.js beside this file
// (build/bundle-client-node.ts): the package's 1,000 modules, loaded one by one, cost a server ≈27 MiB
// more resident memory than the same code as one module (docs/decisions.md). Add a value here, then run
// `npm run bundle-client-node` (npm install does it too).

export type * from "@kubernetes/client-node"
export {
  ADD,
  ApiException,
  BatchV1Api,
  CoreV1Api,
  CustomObjectsApi,
  DELETE,
  ERROR,
  KubeConfig,
  makeInformer,
  PatchStrategy,
  setHeaderOptions,
  UPDATE,
  Watch,
} from "@kubernetes/client-node"
