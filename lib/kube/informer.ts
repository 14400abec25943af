import { errorMessage, SystemError } from "../core/errors.ts"
import type { Log } from "../core/log.ts"
import {
  ADD,
  ApiException,
  DELETE,
  ERROR,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
  makeInformer,
  UPDATE,
} from "./client-node.js"

export type InformerHandlers<T> = {
  /** Added or updated, including the objects of every (re)list. */
  changed(object: T): void
  /** Deleted, or missing from a relist. */
  deleted(object: T): void
}

/** A cache of one kind in one namespace, kept current by list and watch. */
export type Informer<T> = {
  list(): T[]
  get(name: string): T | undefined
  stop(): Promise<void>
}

const firstRetryMs = 200
const maxRetryMs = 5_000

/**
 * client-node's informer (list, then watch from the list's resourceVersion;
 * a watch that ends resumes from the last version seen; 410 Gone lists
 * again) plus what it leaves to its caller: after any other error (the API
 * unreachable, a 5xx) it stops, so this restarts it, backing off up to 5 s.
 * Resolves once the first list has filled the cache.
 */
export async function startInformer<T extends KubernetesObject>(options: {
  kubeConfig: KubeConfig
  path: string
  namespace: string
  list: () => Promise<KubernetesListObject<T>>
  /** Only the objects with these labels; `list` must select the same. */
  labelSelector?: string
  handlers: InformerHandlers<T>
  log: Log
}): Promise<Informer<T>> {
  const { promise: listed, resolve: markListed, reject: refuse } = Promise.withResolvers<void>()
  const informer = makeInformer<T>(
    options.kubeConfig,
    options.path,
    async () => {
      try {
        const list = await options.list()
        retryMs = firstRetryMs
        markListed()
        return list
      } catch (error) {
        // Before the first list, an answer that asking again will not change ends the start with a reason.
        const code = error instanceof ApiException ? error.code : 0
        if (code === 404) {
          refuse(
            new SystemError(
              `the Kubernetes API does not serve ${options.path}; install runnel's CRDs (kubectl apply -f crds/)`,
            ),
          )
        } else if (code === 401 || code === 403) {
          refuse(
            new SystemError(
              `the Kubernetes API refused to list ${options.path} (${code}); give the operator's credentials access to runnel's resources`,
            ),
          )
        }
        throw error
      }
    },
    options.labelSelector,
  )
  let stopped = false
  let retryMs = firstRetryMs
  let retry: NodeJS.Timeout | undefined
  informer.on(ADD, (object) => options.handlers.changed(object))
  informer.on(UPDATE, (object) => options.handlers.changed(object))
  informer.on(DELETE, (object) => options.handlers.deleted(object))
  const begin = () => {
    // start() rejects only when the request cannot even be built (credentials); retried like any error.
    informer.start().catch(retryAfter)
  }
  const retryAfter = (error: unknown) => {
    if (stopped) return
    options.log("informer.error", { path: options.path, error: errorMessage(error), retryMs })
    retry = setTimeout(() => {
      retry = undefined
      if (!stopped) begin()
    }, retryMs)
    retryMs = Math.min(retryMs * 2, maxRetryMs)
  }
  informer.on(ERROR, retryAfter)
  begin()
  try {
    await listed
  } catch (error) {
    stopped = true
    clearTimeout(retry)
    await informer.stop()
    throw error
  }
  return {
    list: () => [...informer.list(options.namespace)],
    get: (name) => informer.get(name, options.namespace),
    async stop() {
      stopped = true
      clearTimeout(retry)
      await informer.stop()
    },
  }
}
