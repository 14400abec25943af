import type {
  KubeConfig,
  KubernetesObject,
  V1Container,
  V1CronJob,
  V1OwnerReference,
  V1Pod,
} from "@kubernetes/client-node"
import {
  ApiException,
  BatchV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubernetesObjectApi,
  PatchStrategy,
  setHeaderOptions,
  Watch,
} from "@kubernetes/client-node"
import { afterAll, beforeAll, describe, expect, it } from "vitest"

/**
 * The part of Kubernetes runnel relies on, as one suite that any API server
 * must pass: the embedded one (kubeserver/) and a real cluster
 * (test-e2e). It drives the API only through `@kubernetes/client-node`,
 * needs runnel's CRDs from `crds/` installed, works in a namespace of its own
 * (created and deleted here), and waits for asynchronous effects (garbage
 * collection) by polling, so it holds for a real controller too.
 */
export type KubeApiUnderTest = {
  readonly kubeConfig: KubeConfig
  /** Resolves once asynchronous work is done, when the server can tell; polling is used either way. */
  readonly settled?: () => Promise<void>
  close(): Promise<void>
}

type Pipeline = KubernetesObject & {
  spec: { content: string; contentType?: string; paused?: boolean; driverConfig?: object }
  status?: { observedGeneration?: number; conditions?: Record<string, unknown>[] }
}

type WatchEvent = { type: string; object: KubernetesObject }

const group = "runnel.dev"
const version = "v1alpha1"
const merge = setHeaderOptions("Content-Type", PatchStrategy.MergePatch)

/** The Status a refused call carries, with its HTTP code. */
export async function refusal(call: Promise<unknown>): Promise<{ code: number; status: Record<string, unknown> }> {
  try {
    await call
  } catch (error) {
    if (!(error instanceof ApiException)) throw error
    const body = error.body
    return { code: error.code, status: typeof body === "string" ? JSON.parse(body) : body }
  }
  throw new Error("the call succeeded; a refusal was expected")
}

export function kubeApiContract(name: string, open: () => Promise<KubeApiUnderTest>) {
  describe(`${name} Kubernetes API`, () => {
    let api: KubeApiUnderTest
    let objects: CustomObjectsApi
    let core: CoreV1Api
    const namespace = `runnel-contract-${Date.now().toString(36)}`
    const pipelines = { group, version, namespace, plural: "pipelines" }
    const runs = { group, version, namespace, plural: "runs" }

    beforeAll(async () => {
      api = await open()
      objects = api.kubeConfig.makeApiClient(CustomObjectsApi)
      core = api.kubeConfig.makeApiClient(CoreV1Api)
      await core.createNamespace({ body: { metadata: { name: namespace } } })
    })
    afterAll(async () => {
      await core?.deleteNamespace({ name: namespace }).catch(() => undefined)
      await api?.close()
    })

    /** Waits for `check` to hold, as a client of a real cluster must for anything a controller does. */
    async function eventually(check: () => Promise<boolean>, what: string) {
      await api.settled?.()
      const deadline = Date.now() + 30_000
      while (!(await check())) {
        if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`)
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
    }

    const exists = async (read: Promise<unknown>) => {
      try {
        await read
        return true
      } catch (error) {
        if (error instanceof ApiException && error.code === 404) return false
        throw error
      }
    }

    const pipeline = (
      pipelineName: string,
      metadata: KubernetesObject["metadata"] = {},
      spec: object = {},
    ): Pipeline => ({
      apiVersion: `${group}/${version}`,
      kind: "Pipeline",
      metadata: { name: pipelineName, ...metadata },
      spec: { content: "export async function pipeline() {}", ...spec },
    })
    const create = (body: Pipeline): Promise<Pipeline> => objects.createNamespacedCustomObject({ ...pipelines, body })
    const get = (pipelineName: string): Promise<Pipeline> =>
      objects.getNamespacedCustomObject({ ...pipelines, name: pipelineName })
    const getRun = (runName: string): Promise<KubernetesObject> =>
      objects.getNamespacedCustomObject({ ...runs, name: runName })
    const ownedBy = (owner: KubernetesObject, blockOwnerDeletion?: boolean): V1OwnerReference => ({
      apiVersion: `${group}/${version}`,
      kind: "Pipeline",
      name: owner.metadata?.name ?? "",
      uid: owner.metadata?.uid ?? "",
      controller: true,
      blockOwnerDeletion,
    })
    const createRun = (runName: string, owners: V1OwnerReference[], finalizers?: string[]): Promise<KubernetesObject> =>
      objects.createNamespacedCustomObject({
        ...runs,
        body: {
          apiVersion: `${group}/${version}`,
          kind: "Run",
          metadata: { name: runName, ownerReferences: owners, finalizers },
          spec: { pipelineRef: { name: owners[0]?.name ?? "none" } },
        },
      })
    const condition = (status: string) => ({
      type: "Ready",
      status,
      reason: "Compiled",
      message: "",
      lastTransitionTime: "2024-01-01T00:00:00Z",
    })

    /** Watches until `until` holds for the events seen, then stops. */
    async function watch(
      query: Record<string, string | number | boolean | undefined>,
      until: (events: WatchEvent[]) => boolean,
      during?: () => Promise<void>,
    ) {
      const events: WatchEvent[] = []
      const { promise: finished, resolve } = Promise.withResolvers<Error | null>()
      const controller = await new Watch(api.kubeConfig).watch(
        `/apis/${group}/${version}/namespaces/${namespace}/pipelines`,
        query,
        (type, object) => {
          events.push({ type, object })
          if (until(events)) resolve(null)
        },
        (error) => resolve(error),
      )
      await during?.()
      const timeout = setTimeout(
        () => resolve(new Error(`watch timed out with ${JSON.stringify(events.map((event) => event.type))}`)),
        10_000,
      )
      const error = await finished
      clearTimeout(timeout)
      controller.abort()
      if (error !== null && error.name !== "AbortError") throw error
      return events.map((event) => `${event.type} ${event.object.metadata?.name ?? ""}`)
    }

    describe("create and get", () => {
      it("creates an object with uid, creationTimestamp, resourceVersion and generation 1, and gets it back", async () => {
        const created = await create(pipeline("hello"))
        expect(created.metadata).toMatchObject({ name: "hello", namespace, generation: 1 })
        expect(created.metadata?.uid).toMatch(/^[0-9a-f-]{36}$/)
        expect(created.metadata?.creationTimestamp).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/)
        expect(created.metadata?.resourceVersion).toMatch(/^\d+$/)
        expect(created.spec.paused).toBe(false) // the schema's default
        expect(await get("hello")).toEqual(created)
      })

      it("names an object from generateName", async () => {
        const created = await create({ ...pipeline(""), metadata: { generateName: "gen-" } })
        expect(created.metadata?.name).toMatch(/^gen-[bcdfghjklmnpqrstvwxz2456789]{5}$/)
      })

      it("refuses a second object of the same name with 409 AlreadyExists", async () => {
        await create(pipeline("twice"))
        const { code, status } = await refusal(create(pipeline("twice")))
        expect(code).toBe(409)
        expect(status).toMatchObject({
          kind: "Status",
          status: "Failure",
          reason: "AlreadyExists",
          message: 'pipelines.runnel.dev "twice" already exists',
          details: { name: "twice", group: "runnel.dev", kind: "pipelines" },
          code: 409,
        })
      })

      it("answers 404 NotFound with Kubernetes' message for a missing object", async () => {
        const { code, status } = await refusal(get("missing"))
        expect(code).toBe(404)
        expect(status).toMatchObject({ reason: "NotFound", message: 'pipelines.runnel.dev "missing" not found' })
      })

      it("refuses to create in a namespace that does not exist", async () => {
        const { code, status } = await refusal(
          objects.createNamespacedCustomObject({
            ...pipelines,
            namespace: `${namespace}-nowhere`,
            body: pipeline("x"),
          }),
        )
        expect(code).toBe(404)
        expect(status.message).toBe(`namespaces "${namespace}-nowhere" not found`)
      })

      it("ignores a status sent on create, since status is a subresource", async () => {
        const created = await create({ ...pipeline("no-status"), status: { observedGeneration: 7 } })
        expect(created.status).toBeUndefined()
      })
    })

    describe("validation", () => {
      it("refuses an object that breaks the schema with 422 Invalid and one cause per field", async () => {
        const body = { ...pipeline("bad"), spec: { contentType: "cobol", paused: "yes" } } as unknown as Pipeline
        const { code, status } = await refusal(create(body))
        expect(code).toBe(422)
        expect(status).toMatchObject({
          reason: "Invalid",
          details: { name: "bad", group: "runnel.dev", kind: "Pipeline" },
        })
        expect(status.message).toMatch(/^Pipeline\.runnel\.dev "bad" is invalid: \[/)
        const causes = (status.details as { causes: { reason: string; field: string }[] }).causes
        expect(causes.map(({ reason, field }) => `${reason} ${field}`).sort()).toEqual([
          "FieldValueNotSupported spec.contentType",
          "FieldValueRequired spec.content",
          "FieldValueTypeInvalid spec.paused",
        ])
      })

      it("refuses a name that is not a DNS-1123 subdomain", async () => {
        const { code, status } = await refusal(create(pipeline("Not_A_Name")))
        expect(code).toBe(422)
        expect(status.message).toContain('metadata.name: Invalid value: "Not_A_Name": a lowercase RFC 1123 subdomain')
      })

      it("rejects unknown fields with fieldValidation=Strict, naming their paths", async () => {
        const body = { ...pipeline("strict"), spec: { content: "x", colour: "red" } } as unknown as Pipeline
        const { code, status } = await refusal(
          objects.createNamespacedCustomObject({ ...pipelines, body, fieldValidation: "Strict" }),
        )
        expect(code).toBe(400)
        expect(status).toMatchObject({
          reason: "BadRequest",
          message:
            'Pipeline in version "v1alpha1" cannot be handled as a Pipeline: strict decoding error: unknown field "spec.colour"',
        })
      })

      it("prunes unknown fields by default and keeps those the schema preserves", async () => {
        const body = {
          ...pipeline("pruned"),
          spec: { content: "x", colour: "red", driverConfig: { host: "h" } },
        } as unknown as Pipeline
        expect((await create(body)).spec).toEqual({ content: "x", paused: false, driverConfig: { host: "h" } })
      })

      it("refuses to change a field the schema makes immutable", async () => {
        const owner = await create(pipeline("immutable-owner"))
        await createRun("immutable-run", [ownedBy(owner)])
        const { code, status } = await refusal(
          objects.patchNamespacedCustomObject(
            { ...runs, name: "immutable-run", body: { spec: { pipelineRef: { name: "other" } } } },
            merge,
          ),
        )
        expect(code).toBe(422)
        expect(status.message).toContain("spec.pipelineRef: Invalid value")
      })
    })

    describe("list", () => {
      beforeAll(async () => {
        for (const [selName, labels] of [
          ["sel-a", { team: "red", tier: "1" }],
          ["sel-b", { team: "blue", tier: "2" }],
          ["sel-c", { team: "green" }],
        ] as const) {
          await create(pipeline(selName, { labels }))
        }
      })

      const names = async (query: { labelSelector?: string; fieldSelector?: string }) => {
        const list = await objects.listNamespacedCustomObject({ ...pipelines, ...query })
        return (list.items as Pipeline[]).map((item) => item.metadata?.name)
      }

      it("selects by labels with =, ==, !=, in, notin, exists and !exists", async () => {
        expect(await names({ labelSelector: "team=red" })).toEqual(["sel-a"])
        expect(await names({ labelSelector: "team==blue" })).toEqual(["sel-b"])
        expect(await names({ labelSelector: "team,team!=red" })).toEqual(["sel-b", "sel-c"])
        expect(await names({ labelSelector: "team in (red, green)" })).toEqual(["sel-a", "sel-c"])
        expect(await names({ labelSelector: "team,team notin (red,green)" })).toEqual(["sel-b"])
        expect(await names({ labelSelector: "team,!tier" })).toEqual(["sel-c"])
      })

      it("selects by metadata.name and metadata.namespace", async () => {
        expect(await names({ fieldSelector: "metadata.name=sel-b" })).toEqual(["sel-b"])
        expect(
          await names({ fieldSelector: `metadata.namespace=${namespace},metadata.name!=sel-b`, labelSelector: "team" }),
        ).toEqual(["sel-a", "sel-c"])
      })

      it("refuses a field it cannot select by with 400", async () => {
        const { code, status } = await refusal(
          objects.listNamespacedCustomObject({ ...pipelines, fieldSelector: "spec.content=x" }),
        )
        expect(code).toBe(400)
        expect(status.message).toContain("field label not supported: spec.content")
      })

      it("pages with limit and continue, as one consistent snapshot", async () => {
        const all = await objects.listNamespacedCustomObject({ ...pipelines })
        const seen: string[] = []
        let token: string | undefined
        let pages = 0
        do {
          const page = await objects.listNamespacedCustomObject({ ...pipelines, limit: 2, _continue: token })
          seen.push(...(page.items as Pipeline[]).map((item) => item.metadata?.name ?? ""))
          token = page.metadata.continue
          if (pages === 0) {
            // A change after the first page does not show in the later pages of the same list.
            await create(pipeline("zzz-after-first-page"))
            expect(page.metadata.remainingItemCount).toBe(all.items.length - 2)
          }
          pages++
        } while (token)
        expect(seen).toEqual((all.items as Pipeline[]).map((item) => item.metadata?.name))
        expect(pages).toBe(Math.ceil(all.items.length / 2))
      })
    })

    describe("update and patch", () => {
      it("replaces with the current resourceVersion and refuses a stale one with 409 Conflict", async () => {
        const created = await create(pipeline("upd"))
        const updated = await objects.replaceNamespacedCustomObject({
          ...pipelines,
          name: "upd",
          body: { ...created, spec: { ...created.spec, content: "v2" } },
        })
        expect(updated.metadata.generation).toBe(2)
        const { code, status } = await refusal(
          objects.replaceNamespacedCustomObject({
            ...pipelines,
            name: "upd",
            body: { ...created, spec: { content: "v3" } },
          }),
        )
        expect(code).toBe(409)
        expect(status).toMatchObject({
          reason: "Conflict",
          message:
            'Operation cannot be fulfilled on pipelines.runnel.dev "upd": the object has been modified; please apply your changes to the latest version and try again',
          details: { name: "upd", group: "runnel.dev", kind: "pipelines" },
        })
      })

      it("does not write an update that changes nothing", async () => {
        const created = await create(pipeline("same"))
        const again = await objects.replaceNamespacedCustomObject({ ...pipelines, name: "same", body: created })
        expect(again.metadata.resourceVersion).toBe(created.metadata?.resourceVersion)
      })

      it("applies a JSON merge patch", async () => {
        await create(pipeline("merge", { labels: { a: "1", b: "2" } }))
        const patched = await objects.patchNamespacedCustomObject(
          { ...pipelines, name: "merge", body: { metadata: { labels: { a: null, c: "3" } }, spec: { paused: true } } },
          merge,
        )
        expect(patched.metadata.labels).toEqual({ b: "2", c: "3" })
        expect(patched.spec.paused).toBe(true)
        expect(patched.metadata.generation).toBe(2)
      })

      it("applies a JSON patch and answers 422 when its test fails", async () => {
        await create(pipeline("jsonpatch"))
        const json = setHeaderOptions("Content-Type", PatchStrategy.JsonPatch)
        const patched = await objects.patchNamespacedCustomObject(
          { ...pipelines, name: "jsonpatch", body: [{ op: "replace", path: "/spec/content", value: "new" }] },
          json,
        )
        expect(patched.spec.content).toBe("new")
        const { code } = await refusal(
          objects.patchNamespacedCustomObject(
            { ...pipelines, name: "jsonpatch", body: [{ op: "test", path: "/spec/content", value: "old" }] },
            json,
          ),
        )
        expect(code).toBe(422)
      })

      it("refuses a strategic merge patch of a custom resource with 415", async () => {
        await create(pipeline("smp"))
        const { code, status } = await refusal(
          objects.patchNamespacedCustomObject(
            { ...pipelines, name: "smp", body: { spec: { paused: true } } },
            setHeaderOptions("Content-Type", PatchStrategy.StrategicMergePatch),
          ),
        )
        expect(code).toBe(415)
        expect(status.reason).toBe("UnsupportedMediaType")
      })
    })

    describe("status subresource", () => {
      it("keeps spec and status apart and moves generation on spec changes only", async () => {
        const created = await create(pipeline("st"))
        const withStatus = await objects.patchNamespacedCustomObjectStatus(
          {
            ...pipelines,
            name: "st",
            body: { spec: { content: "ignored" }, status: { observedGeneration: 1, conditions: [condition("True")] } },
          },
          merge,
        )
        expect(withStatus.spec.content).toBe(created.spec.content)
        expect(withStatus.status.observedGeneration).toBe(1)
        expect(withStatus.metadata.generation).toBe(1)

        const mainWrite = await objects.replaceNamespacedCustomObject({
          ...pipelines,
          name: "st",
          body: { ...withStatus, spec: { content: "v2" }, status: { observedGeneration: 99 } },
        })
        expect(mainWrite.status.observedGeneration).toBe(1)
        expect(mainWrite.metadata.generation).toBe(2)

        const statusPut = await objects.replaceNamespacedCustomObjectStatus({
          ...pipelines,
          name: "st",
          body: { ...mainWrite, status: { observedGeneration: 2 } },
        })
        expect(statusPut.status).toEqual({ observedGeneration: 2 })
        expect(statusPut.metadata.generation).toBe(2)
        expect((await objects.getNamespacedCustomObjectStatus({ ...pipelines, name: "st" })).status).toEqual({
          observedGeneration: 2,
        })
      })

      it("validates status writes against the schema", async () => {
        await create(pipeline("st-bad"))
        const { code, status } = await refusal(
          objects.patchNamespacedCustomObjectStatus(
            { ...pipelines, name: "st-bad", body: { status: { conditions: [condition("Maybe")] } } },
            merge,
          ),
        )
        expect(code).toBe(422)
        expect(status.message).toContain('status.conditions[0].status: Unsupported value: "Maybe"')
      })
    })

    describe("core Secrets and the generic objects client", () => {
      it("stores a Secret's stringData as base64 data and answers its deletion with a Status", async () => {
        const secret = await core.createNamespacedSecret({
          namespace,
          body: { metadata: { name: "webhook" }, stringData: { webhookSecret: "s3cret" } },
        })
        expect(secret.data).toEqual({ webhookSecret: Buffer.from("s3cret").toString("base64") })
        expect(secret.type).toBe("Opaque")
        expect((await core.listNamespacedSecret({ namespace })).items.map((item) => item.metadata?.name)).toContain(
          "webhook",
        )
        expect(await core.deleteNamespacedSecret({ namespace, name: "webhook" })).toMatchObject({ status: "Success" })
      })

      it("serves KubernetesObjectApi, which finds resources through discovery", async () => {
        const client = KubernetesObjectApi.makeApiClient(api.kubeConfig)
        const header = { apiVersion: `${group}/${version}`, kind: "Pipeline", metadata: { name: "generic", namespace } }
        const created: KubernetesObject = await client.create({ ...pipeline("generic"), metadata: header.metadata })
        expect(created.metadata?.uid).toBeDefined()
        const read: KubernetesObject = await client.read(header)
        expect(read.metadata?.uid).toBe(created.metadata?.uid)
        const patched = await client.patch(
          { ...header, spec: { paused: true } },
          undefined,
          undefined,
          undefined,
          undefined,
          PatchStrategy.MergePatch,
        )
        expect((patched as Pipeline).spec.paused).toBe(true)
        await client.delete(header)
        expect((await refusal(client.read(header))).code).toBe(404)
      })
    })

    describe("watch", () => {
      it("resumes from a resourceVersion with the events after it, then follows live", async () => {
        const first = await create(pipeline("w-a", { labels: { set: "resume" } }))
        await create(pipeline("w-b", { labels: { set: "resume" } }))
        await objects.patchNamespacedCustomObject(
          { ...pipelines, name: "w-b", body: { spec: { content: "y" } } },
          merge,
        )
        await objects.deleteNamespacedCustomObject({ ...pipelines, name: "w-a" })
        const events = await watch(
          { resourceVersion: first.metadata?.resourceVersion, labelSelector: "set=resume" },
          (seen) => seen.length === 4,
          async () => {
            await create(pipeline("w-live", { labels: { set: "resume" } }))
          },
        )
        expect(events).toEqual(["ADDED w-b", "MODIFIED w-b", "DELETED w-a", "ADDED w-live"])
      })

      it("starts with the current objects as ADDED when no resourceVersion is given", async () => {
        await create(pipeline("w-initial", { labels: { set: "initial" } }))
        expect(await watch({ labelSelector: "set=initial" }, (seen) => seen.length === 1)).toEqual(["ADDED w-initial"])
      })

      it("applies label selectors, reporting an object that leaves the selection as DELETED", async () => {
        const created = await create(pipeline("w-sel", { labels: { colour: "red" } }))
        const events = await watch(
          { resourceVersion: created.metadata?.resourceVersion, labelSelector: "colour=red" },
          (seen) => seen.length === 2,
          async () => {
            await create(pipeline("w-other", { labels: { colour: "blue" } }))
            await objects.patchNamespacedCustomObject(
              { ...pipelines, name: "w-sel", body: { metadata: { labels: { size: "l" } } } },
              merge,
            )
            await objects.patchNamespacedCustomObject(
              { ...pipelines, name: "w-sel", body: { metadata: { labels: { colour: "blue" } } } },
              merge,
            )
          },
        )
        expect(events).toEqual(["MODIFIED w-sel", "DELETED w-sel"])
      })
    })

    describe("finalizers", () => {
      it("marks an object with finalizers as deleting and removes it once they are gone", async () => {
        await create(pipeline("fin", { finalizers: ["runnel.dev/cleanup"] }))
        const answer: Pipeline = await objects.deleteNamespacedCustomObject({ ...pipelines, name: "fin" })
        expect(answer.metadata?.deletionTimestamp).toBeDefined()
        const pending = await get("fin")
        expect(pending.metadata?.deletionTimestamp).toBeDefined()
        expect(pending.metadata?.finalizers).toEqual(["runnel.dev/cleanup"])
        const { code } = await refusal(
          objects.patchNamespacedCustomObject(
            { ...pipelines, name: "fin", body: { metadata: { finalizers: ["runnel.dev/cleanup", "new/one"] } } },
            merge,
          ),
        )
        expect(code).toBe(422)
        await objects.patchNamespacedCustomObject(
          { ...pipelines, name: "fin", body: { metadata: { finalizers: null } } },
          merge,
        )
        expect(await exists(get("fin"))).toBe(false)
      })

      it("refuses a deletion whose resourceVersion precondition is stale with 409", async () => {
        const created = await create(pipeline("precondition"))
        await objects.patchNamespacedCustomObject(
          { ...pipelines, name: "precondition", body: { spec: { content: "y" } } },
          merge,
        )
        const { code } = await refusal(
          objects.deleteNamespacedCustomObject({
            ...pipelines,
            name: "precondition",
            body: { preconditions: { resourceVersion: created.metadata?.resourceVersion } },
          }),
        )
        expect(code).toBe(409)
      })
    })

    describe("batch/v1 CronJobs (a Schedule's mirror in cronjob mode)", () => {
      // Without a schedule it is invalid, which the type cannot say: hence the cast.
      const cronJob = (cronJobName: string, owners?: V1OwnerReference[], schedule?: string) =>
        ({
          apiVersion: "batch/v1",
          kind: "CronJob",
          metadata: { name: cronJobName, ownerReferences: owners },
          spec: {
            ...(schedule === undefined ? {} : { schedule }),
            timeZone: "Europe/Paris",
            // Suspended: a real cluster's controller must not start Jobs from this suite.
            suspend: true,
            jobTemplate: {
              spec: {
                template: {
                  spec: {
                    restartPolicy: "OnFailure",
                    containers: [{ name: "fire", image: "busybox", args: ["true"] }],
                  },
                },
              },
            },
          },
        }) as V1CronJob

      it("stores a CronJob with Kubernetes' defaults, refuses one without a schedule, and deletes it with its owner", async () => {
        const batch = api.kubeConfig.makeApiClient(BatchV1Api)
        const owner = await create(pipeline("cron-owner"))
        const created = await batch.createNamespacedCronJob({
          namespace,
          body: cronJob("cron-mirror", [ownedBy(owner)], "0 9 * * *"),
        })
        expect(created.spec).toMatchObject({
          schedule: "0 9 * * *",
          timeZone: "Europe/Paris",
          suspend: true,
          concurrencyPolicy: "Allow",
          successfulJobsHistoryLimit: 3,
          failedJobsHistoryLimit: 1,
        })
        const replaced = await batch.replaceNamespacedCronJob({
          namespace,
          name: "cron-mirror",
          body: {
            ...created,
            spec: { ...created.spec, schedule: "0 10 * * *", jobTemplate: created.spec?.jobTemplate ?? {} },
          },
        })
        expect(replaced.spec?.schedule).toBe("0 10 * * *")
        expect((await refusal(batch.createNamespacedCronJob({ namespace, body: cronJob("cron-bad") }))).code).toBe(422)
        await objects.deleteNamespacedCustomObject({ ...pipelines, name: "cron-owner" })
        await eventually(
          async () => !(await exists(batch.readNamespacedCronJob({ namespace, name: "cron-mirror" }))),
          "the CronJob goes with its owner",
        )
      })
    })

    describe("cascading deletion", () => {
      it("deletes dependents after their owner in the background (the default)", async () => {
        const owner = await create(pipeline("bg-owner"))
        await createRun("bg-run-1", [ownedBy(owner)])
        await createRun("bg-run-2", [ownedBy(owner)])
        await core.createNamespacedSecret({
          namespace,
          body: {
            metadata: { name: "bg-secret", ownerReferences: [ownedBy(owner)] },
            stringData: { webhookSecret: "s" },
          },
        })
        await objects.deleteNamespacedCustomObject({ ...pipelines, name: "bg-owner" })
        expect(await exists(get("bg-owner"))).toBe(false)
        await eventually(
          async () =>
            !(await exists(getRun("bg-run-1"))) &&
            !(await exists(getRun("bg-run-2"))) &&
            !(await exists(core.readNamespacedSecret({ namespace, name: "bg-secret" }))),
          "the dependents are gone",
        )
      })

      it("in the foreground, keeps the owner until its blocking dependents are gone", async () => {
        const owner = await create(pipeline("fg-owner"))
        await createRun("fg-run", [ownedBy(owner, true)], ["runnel.dev/hold"])
        await objects.deleteNamespacedCustomObject({ ...pipelines, name: "fg-owner", propagationPolicy: "Foreground" })
        await eventually(
          async () => (await getRun("fg-run")).metadata?.deletionTimestamp !== undefined,
          "the dependent is being deleted",
        )
        const waiting = await get("fg-owner")
        expect(waiting.metadata?.deletionTimestamp).toBeDefined()
        expect(waiting.metadata?.finalizers).toEqual(["foregroundDeletion"])

        await objects.patchNamespacedCustomObject(
          { ...runs, name: "fg-run", body: { metadata: { finalizers: null } } },
          merge,
        )
        await eventually(async () => !(await exists(get("fg-owner"))), "the owner is gone")
        expect(await exists(getRun("fg-run"))).toBe(false)
      })

      it("with Orphan, deletes the owner and leaves its dependents without the reference", async () => {
        const owner = await create(pipeline("orphan-owner"))
        await createRun("orphan-run", [ownedBy(owner)])
        await objects.deleteNamespacedCustomObject({ ...pipelines, name: "orphan-owner", propagationPolicy: "Orphan" })
        await eventually(async () => !(await exists(get("orphan-owner"))), "the owner is gone")
        const dependent = await getRun("orphan-run")
        expect(dependent.metadata?.ownerReferences).toBeUndefined()
        expect(dependent.metadata?.deletionTimestamp).toBeUndefined()
      })

      it("keeps a dependent that still has a live owner, dropping the reference to the gone one", async () => {
        const first = await create(pipeline("two-owners-a"))
        const second = await create(pipeline("two-owners-b"))
        await createRun("shared-run", [ownedBy(first), { ...ownedBy(second), controller: false }])
        await objects.deleteNamespacedCustomObject({ ...pipelines, name: "two-owners-a" })
        await eventually(
          async () => (await getRun("shared-run")).metadata?.ownerReferences?.length === 1,
          "the reference to the gone owner is dropped",
        )
        expect((await getRun("shared-run")).metadata?.ownerReferences?.map((reference) => reference.name)).toEqual([
          "two-owners-b",
        ])
      })
    })

    describe("namespaces", () => {
      it("deletes what a namespace holds, then the namespace", async () => {
        const scratch = `${namespace}-scratch`
        await core.createNamespace({ body: { metadata: { name: scratch } } })
        await objects.createNamespacedCustomObject({ ...pipelines, namespace: scratch, body: pipeline("inside") })
        expect(await core.deleteNamespace({ name: scratch })).toMatchObject({ status: { phase: "Terminating" } })
        await eventually(async () => !(await exists(core.readNamespace({ name: scratch }))), "the namespace is gone")
      })

      it("has a default namespace that cannot be deleted", async () => {
        expect((await core.readNamespace({ name: "default" })).status?.phase).toBe("Active")
        expect((await refusal(core.deleteNamespace({ name: "default" }))).code).toBe(403)
      })
    })
  })
}

export type PodContractOptions = {
  /** An image with `sh`, `echo`, `sleep` and `cat` that the cluster can run; `busybox` by default. */
  readonly image?: string
}

/**
 * core/v1 Pods as the Kubernetes API reference describes them and a kubelet
 * reports them: status phases and container states, pods/log, graceful
 * deletion, selectors, secrets as env and files, emptyDir and claims, and
 * owner references. Needs a node that can run `image`; waits by polling, so
 * it holds for a real cluster's scheduler and kubelet too.
 */
export function kubePodContract(name: string, open: () => Promise<KubeApiUnderTest>, options: PodContractOptions = {}) {
  const image = options.image ?? "busybox"
  describe(`${name} Kubernetes API's Pods`, () => {
    let api: KubeApiUnderTest
    let core: CoreV1Api
    let objects: CustomObjectsApi
    const namespace = `runnel-pods-${Date.now().toString(36)}`

    beforeAll(async () => {
      api = await open()
      core = api.kubeConfig.makeApiClient(CoreV1Api)
      objects = api.kubeConfig.makeApiClient(CustomObjectsApi)
      await core.createNamespace({ body: { metadata: { name: namespace } } })
    })
    afterAll(async () => {
      await core?.deleteNamespace({ name: namespace }).catch(() => undefined)
      await api?.close()
    })

    const pod = (podName: string, script: string, more: Partial<V1Pod["spec"]> = {}, labels = {}): V1Pod => ({
      metadata: { name: podName, labels },
      spec: {
        restartPolicy: "Never",
        terminationGracePeriodSeconds: 5,
        containers: [{ name: "main", image, command: ["sh", "-c", script] }],
        ...more,
      } as V1Pod["spec"],
    })
    const createPod = (body: V1Pod) => core.createNamespacedPod({ namespace, body })
    const readPod = (podName: string) => core.readNamespacedPod({ namespace, name: podName })

    /** Polls the Pod until `check` holds for it; answers it. */
    async function podWhen(podName: string, check: (pod: V1Pod) => boolean, what: string): Promise<V1Pod> {
      const deadline = Date.now() + 60_000
      for (;;) {
        const found = await readPod(podName)
        if (check(found)) return found
        if (Date.now() > deadline)
          throw new Error(`timed out waiting until pod ${podName} ${what}: ${JSON.stringify(found.status)}`)
        await new Promise((resolve) => setTimeout(resolve, 100))
      }
    }
    const finished = (found: V1Pod) => found.status?.phase === "Succeeded" || found.status?.phase === "Failed"
    const running = (found: V1Pod) => found.status?.containerStatuses?.[0]?.state?.running !== undefined

    async function gone(podName: string) {
      const deadline = Date.now() + 60_000
      for (;;) {
        try {
          await readPod(podName)
        } catch (error) {
          if (error instanceof ApiException && error.code === 404) return
          throw error
        }
        if (Date.now() > deadline) throw new Error(`timed out waiting until pod ${podName} is gone`)
        await new Promise((resolve) => setTimeout(resolve, 100))
      }
    }

    it("starts a Pod Pending with the defaults, and reports Succeeded with the container's terminated state", async () => {
      const container: V1Container = { name: "main", image, command: ["sh", "-c", "echo done"] }
      const created = await createPod({
        metadata: { name: "succeeds" },
        spec: { restartPolicy: "Never", containers: [container] },
      })
      expect(created.status?.phase).toBe("Pending")
      expect(created.spec?.terminationGracePeriodSeconds).toBe(30)
      const done = await podWhen("succeeds", finished, "has finished")
      expect(done.status?.phase).toBe("Succeeded")
      expect(done.spec?.nodeName).toEqual(expect.any(String))
      const [status] = done.status?.containerStatuses ?? []
      expect(status).toMatchObject({ name: "main", ready: false, restartCount: 0 })
      expect(status?.state?.terminated).toMatchObject({ exitCode: 0, reason: "Completed" })
      expect(status?.state?.terminated?.startedAt).toBeInstanceOf(Date)
      expect(status?.state?.terminated?.finishedAt).toBeInstanceOf(Date)
      expect(done.status?.conditions?.find((condition) => condition.type === "PodScheduled")?.status).toBe("True")
      expect(done.status?.startTime).toBeInstanceOf(Date)
    })

    it("enforces a container's memory limit: Failed, exit code 137, reason OOMKilled", async () => {
      const container: V1Container = {
        name: "main",
        image,
        command: ["sh", "-c", "head -c 64m /dev/zero | tail"],
        resources: { limits: { memory: "16Mi" } },
      }
      await createPod({ metadata: { name: "oom" }, spec: { restartPolicy: "Never", containers: [container] } })
      const done = await podWhen("oom", finished, "has finished")
      expect(done.status?.phase).toBe("Failed")
      expect(done.status?.containerStatuses?.[0]?.state?.terminated).toMatchObject({
        exitCode: 137,
        reason: "OOMKilled",
      })
      // A limit alone is also the request: both given for memory only is Burstable.
      expect(done.spec?.containers[0]?.resources?.requests).toEqual({ memory: "16Mi" })
      expect(done.status?.qosClass).toBe("Burstable")
    })

    it("refuses a resource quantity that is not one with 400, and a request above its limit with 422", async () => {
      const sized = (podName: string, resources: V1Container["resources"]): V1Pod => ({
        metadata: { name: podName },
        spec: { containers: [{ name: "main", image, command: ["true"], resources }] },
      })
      const lots = await refusal(createPod(sized("lots", { limits: { memory: "lots" } })))
      expect(lots.code).toBe(400)
      expect(lots.status.message).toContain("quantities must match the regular expression")
      const above = await refusal(createPod(sized("above", { requests: { cpu: "2" }, limits: { cpu: "1" } })))
      expect(above.code).toBe(422)
      expect(above.status.message).toContain(
        'spec.containers[0].resources.requests: Invalid value: "2": must be less than or equal to cpu limit of 1',
      )
    })

    it("leaves a Pod whose required node affinity matches no node Pending, Unschedulable in the scheduler's words", async () => {
      const affinity = {
        nodeAffinity: {
          requiredDuringSchedulingIgnoredDuringExecution: {
            nodeSelectorTerms: [{ matchFields: [{ key: "metadata.name", operator: "In", values: ["no-such-node"] }] }],
          },
        },
      }
      await createPod(pod("elsewhere", "true", { affinity }))
      const waiting = await podWhen("elsewhere", (found) => (found.status?.conditions ?? []).length > 0, "is judged")
      expect(waiting.spec?.nodeName).toBeUndefined()
      const scheduled = waiting.status?.conditions?.find((condition) => condition.type === "PodScheduled")
      expect(scheduled).toMatchObject({ status: "False", reason: "Unschedulable" })
      expect(scheduled?.message).toContain("didn't match Pod's node affinity/selector")
    })

    it("reports Failed with the exit code and reason Error for a container that exits non-zero", async () => {
      await createPod(pod("fails", "exit 3"))
      const done = await podWhen("fails", finished, "has finished")
      expect(done.status?.phase).toBe("Failed")
      expect(done.status?.containerStatuses?.[0]?.state?.terminated).toMatchObject({ exitCode: 3, reason: "Error" })
    })

    it("reports a running container with running.startedAt, Running and Ready, then serves its log", async () => {
      await createPod(pod("runs", "echo first; echo second; echo third >&2; sleep 300"))
      const live = await podWhen("runs", running, "runs")
      expect(live.status?.phase).toBe("Running")
      expect(live.status?.containerStatuses?.[0]?.state?.running?.startedAt).toBeInstanceOf(Date)
      expect(live.status?.conditions?.find((condition) => condition.type === "Ready")?.status).toBe("True")
      const log = (more: object = {}) => core.readNamespacedPodLog({ namespace, name: "runs", ...more })
      let all = ""
      const deadline = Date.now() + 30_000
      while (!all.includes("third") && Date.now() < deadline) all = await log()
      expect(all.split("\n").sort()).toEqual(["", "first", "second", "third"])
      expect(await log({ container: "main", tailLines: 1 })).toMatch(/^(second|third)\n$/)
      expect(await log({ limitBytes: 3 })).toHaveLength(3)
      expect(await log({ timestamps: true })).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z first\n/m)
      const unknown = await refusal(log({ container: "nope" }))
      expect(unknown.code).toBe(400)
      expect(String(unknown.status.message)).toContain("nope")
      await core.deleteNamespacedPod({ namespace, name: "runs", gracePeriodSeconds: 0 })
    })

    it("marks a running Pod for deletion with the grace period, then removes it once its containers stopped", async () => {
      await createPod(pod("graceful", "trap 'exit 0' TERM; while true; do sleep 0.1; done"))
      await podWhen("graceful", running, "runs")
      await core.deleteNamespacedPod({ namespace, name: "graceful", gracePeriodSeconds: 20 })
      const deleting = await readPod("graceful").catch(() => undefined)
      if (deleting !== undefined) {
        expect(deleting.metadata?.deletionTimestamp).toBeInstanceOf(Date)
        expect(deleting.metadata?.deletionGracePeriodSeconds).toBeLessThanOrEqual(20)
      }
      await gone("graceful")
    })

    it("lists Pods by label, by spec.nodeName and by status.phase", async () => {
      await createPod(pod("picked", "true", {}, { pick: "yes" }))
      await createPod(pod("skipped", "exit 1", {}, { pick: "no" }))
      const done = await podWhen("picked", finished, "has finished")
      await podWhen("skipped", finished, "has finished")
      const names = async (query: { labelSelector?: string; fieldSelector?: string }) =>
        (await core.listNamespacedPod({ namespace, ...query })).items.map((item) => item.metadata?.name).sort()
      expect(await names({ labelSelector: "pick=yes" })).toEqual(["picked"])
      expect(await names({ labelSelector: "pick", fieldSelector: "status.phase=Failed" })).toEqual(["skipped"])
      expect(await names({ labelSelector: "pick", fieldSelector: `spec.nodeName=${done.spec?.nodeName}` })).toEqual([
        "picked",
        "skipped",
      ])
      expect(await names({ labelSelector: "pick", fieldSelector: "spec.nodeName=no-such-node" })).toEqual([])
    })

    it("resolves secretKeyRef env and secret volumes when it starts the container, keeping the values out of the Pod", async () => {
      await core.createNamespacedSecret({
        namespace,
        body: { metadata: { name: "credentials" }, stringData: { token: "s3cr3t-value", file: "from-a-file" } },
      })
      const spec = pod("secret-user", 'echo "env=$TOKEN"; cat /etc/credentials/file').spec
      const container = spec?.containers[0] as V1Container
      await createPod({
        metadata: { name: "secret-user" },
        spec: {
          ...spec,
          containers: [
            {
              ...container,
              env: [{ name: "TOKEN", valueFrom: { secretKeyRef: { name: "credentials", key: "token" } } }],
              volumeMounts: [{ name: "credentials", mountPath: "/etc/credentials", readOnly: true }],
            },
          ],
          volumes: [{ name: "credentials", secret: { secretName: "credentials" } }],
        },
      })
      const done = await podWhen("secret-user", finished, "has finished")
      expect(done.status?.phase).toBe("Succeeded")
      expect(await core.readNamespacedPodLog({ namespace, name: "secret-user" })).toBe("env=s3cr3t-value\nfrom-a-file")
      expect(JSON.stringify(done)).not.toContain("s3cr3t-value")
    })

    it("shares an emptyDir between containers and a claim between Pods", async () => {
      await core.createNamespacedPersistentVolumeClaim({
        namespace,
        body: {
          metadata: { name: "shared" },
          spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "10Mi" } } },
        },
      })
      const claim = { name: "data", persistentVolumeClaim: { claimName: "shared" } }
      await createPod({
        metadata: { name: "writer" },
        spec: {
          restartPolicy: "Never",
          containers: [
            {
              name: "first",
              image,
              command: ["sh", "-c", "echo scratch > /scratch/note; echo kept > /data/kept"],
              volumeMounts: [
                { name: "scratch", mountPath: "/scratch" },
                { name: "data", mountPath: "/data" },
              ],
            },
            {
              name: "second",
              image,
              command: ["sh", "-c", "while [ ! -f /scratch/note ]; do sleep 0.1; done; cat /scratch/note"],
              volumeMounts: [{ name: "scratch", mountPath: "/scratch" }],
            },
          ],
          volumes: [{ name: "scratch", emptyDir: {} }, claim],
        },
      })
      expect((await podWhen("writer", finished, "has finished")).status?.phase).toBe("Succeeded")
      expect(await core.readNamespacedPodLog({ namespace, name: "writer", container: "second" })).toBe("scratch\n")
      await createPod({
        metadata: { name: "reader" },
        spec: {
          restartPolicy: "Never",
          containers: [
            {
              name: "main",
              image,
              command: ["cat", "/data/kept"],
              volumeMounts: [{ name: "data", mountPath: "/data" }],
            },
          ],
          volumes: [claim],
        },
      })
      expect((await podWhen("reader", finished, "has finished")).status?.phase).toBe("Succeeded")
      expect(await core.readNamespacedPodLog({ namespace, name: "reader" })).toBe("kept\n")
      expect((await core.readNamespacedPersistentVolumeClaim({ namespace, name: "shared" })).status?.phase).toBe(
        "Bound",
      )
    })

    it("reports a container killed past its memory limit as terminated with reason OOMKilled", async () => {
      const greedy: V1Container = {
        name: "main",
        image,
        command: ["sh", "-c", 'x=$(head -c 60000000 /dev/zero | tr "\\0" a); echo survived'],
        resources: { limits: { memory: "16Mi" }, requests: { memory: "16Mi" } },
      }
      await createPod({ metadata: { name: "greedy" }, spec: { restartPolicy: "Never", containers: [greedy] } })
      const done = await podWhen("greedy", finished, "has finished")
      expect(done.status?.phase).toBe("Failed")
      expect(done.status?.containerStatuses?.[0]?.state?.terminated).toMatchObject({
        exitCode: 137,
        reason: "OOMKilled",
      })
    })

    it("says which image could not be pulled, in the waiting state", async () => {
      const missing = "runnel-test/no-such-image:1"
      await createPod({
        metadata: { name: "unpullable" },
        spec: { restartPolicy: "Never", containers: [{ name: "main", image: missing }] },
      })
      const waiting = await podWhen(
        "unpullable",
        (found) =>
          /ErrImagePull|ImagePullBackOff/.test(found.status?.containerStatuses?.[0]?.state?.waiting?.reason ?? ""),
        "cannot pull its image",
      )
      expect(waiting.status?.phase).toBe("Pending")
      expect(waiting.status?.containerStatuses?.[0]?.state?.waiting?.message).toContain(missing)
      await core.deleteNamespacedPod({ namespace, name: "unpullable" })
      await gone("unpullable")
    })

    it("deletes a Pod whose owner is deleted", async () => {
      const owner = (await objects.createNamespacedCustomObject({
        group,
        version,
        namespace,
        plural: "pipelines",
        body: {
          apiVersion: `${group}/${version}`,
          kind: "Pipeline",
          metadata: { name: "pod-owner" },
          spec: { content: "x" },
        },
      })) as KubernetesObject
      const reference = {
        apiVersion: `${group}/${version}`,
        kind: "Pipeline",
        name: "pod-owner",
        uid: owner.metadata?.uid ?? "",
        controller: true,
      }
      await createPod({ ...pod("owned", "sleep 300"), metadata: { name: "owned", ownerReferences: [reference] } })
      await objects.deleteNamespacedCustomObject({ group, version, namespace, plural: "pipelines", name: "pod-owner" })
      await api.settled?.()
      await gone("owned")
    })
  })
}
