import { compileExpression } from "../lib/cel/expression.ts"
import type { Feature } from "../lib/config/features.ts"
import { badRequest } from "../lib/core/errors.ts"
import type { PipelineSpec } from "../lib/kube/resources.ts"
import { inferContentType } from "../lib/script/content-type.ts"
import { checkContent } from "../lib/script/pipeline-check.ts"
import { assertSecretEntry } from "../lib/secrets/secret-store.ts"
import { onlyFields } from "./body.ts"

/** The fields of a PUT or POST pipeline body besides `name` (contract.md section 4). */
export const pipelineFields = [
  "content",
  "content_type",
  "driver",
  "driver_config",
  "webhook_secret",
  "rbac_expression",
  "secrets",
]

/**
 * What a PUT or POST body asks for: the spec, and the write-only parts kept
 * outside it. `webhookSecret` is undefined to keep the current one, "" to
 * remove it; `secrets` are added to (or replace keys of) the pipeline scope.
 */
export type PipelineWrite = {
  spec: PipelineSpec
  webhookSecret: string | undefined
  secrets: Record<string, string>
  /** What the check noted without refusing (YAML top-level keys Concourse ignores), for the response. */
  notes: readonly string[]
}

export type PipelineBodyRules = {
  /** The driver of a pipeline stored without one. */
  defaultDriver: string
  allowedDrivers: readonly string[]
  features: readonly Feature[]
  /** False under Basic Auth: its users have no identity an expression could test (interface.md). */
  rbacExpressions: boolean
}

/**
 * Checks a body and turns it into a write, refusing with a 400 that says what
 * is wrong: a script that does not compile (with the compiler's message and
 * line), a driver not allowed, a gated field whose feature is off. What the
 * body cannot set (paused, the webhook secret's reference) comes from `previous`.
 */
export async function pipelineWrite(
  name: string,
  body: Record<string, unknown>,
  rules: PipelineBodyRules,
  previous?: PipelineSpec,
): Promise<PipelineWrite> {
  onlyFields(body, pipelineFields)
  const content = body.content
  if (typeof content !== "string" || content.trim() === "") {
    throw badRequest('"content" is required: the pipeline\'s source text, a non-empty string')
  }
  const spec: PipelineSpec = {
    content,
    contentType: contentTypeOf(body.content_type, content),
    driver: driverOf(body.driver, rules),
  }
  const driverConfig = body.driver_config
  if (driverConfig !== undefined && driverConfig !== null) {
    if (typeof driverConfig !== "object" || Array.isArray(driverConfig)) {
      throw badRequest('"driver_config" must be a JSON object, for example {"host": "unix:///var/run/docker.sock"}')
    }
    spec.driverConfig = driverConfig as Record<string, unknown>
  }
  const rbac = body.rbac_expression
  if (rbac !== undefined && rbac !== null && rbac !== "") {
    if (typeof rbac !== "string") throw badRequest('"rbac_expression" must be a string (a CEL expression)')
    if (!rules.rbacExpressions) {
      throw badRequest(
        "rbac_expression is refused: this server uses Basic Auth, whose users have no provider identity to match; pipeline RBAC needs OAuth (docs/auth.md)",
      )
    }
    // Compiled now, so a mistake is a 400 with its position rather than a pipeline nobody can see.
    try {
      compileExpression("rbac", rbac)
    } catch (error) {
      throw badRequest(`rbac_expression: ${(error as Error).message}`, { cause: error })
    }
    spec.rbacExpression = rbac
  }
  const webhookSecret = webhookSecretOf(body.webhook_secret, rules.features)
  const secrets = secretMapOf("secrets", body.secrets, rules.features, "; store the pipeline without them")
  // Refused at store time with the compiler's or validator's message, so broken content never reaches a run.
  const { problem, notes } = await checkContent(name, spec.contentType ?? "ts", content)
  if (problem !== undefined) throw badRequest(problem)
  if (previous?.paused === true) spec.paused = true
  const keepsRef = webhookSecret === undefined && previous?.webhookSecretRef !== undefined
  if (keepsRef) spec.webhookSecretRef = previous.webhookSecretRef
  if (webhookSecret !== undefined && webhookSecret !== "") spec.webhookSecretRef = { name: webhookSecretName(name) }
  return { spec, webhookSecret, secrets, notes }
}

/** The core Secret the API server keeps a pipeline's webhook secret in, owned by the Pipeline. */
export const webhookSecretName = (pipeline: string) => `runnel-webhook-${pipeline}`

function webhookSecretOf(value: unknown, features: readonly Feature[]): string | undefined {
  if (value === undefined || value === null) return undefined
  if (!features.includes("webhooks")) {
    throw badRequest(
      'webhook_secret is refused: the "webhooks" feature is not enabled on this server (--allowed-features); store the pipeline without it',
    )
  }
  if (typeof value !== "string") {
    throw badRequest('"webhook_secret" must be a string (the shared secret of the provider), or "" to remove it')
  }
  if (value.length > 1024) throw badRequest('"webhook_secret" is too long: at most 1024 characters')
  return value
}

/**
 * A map of secret names to values in a body (`secrets`, `global_secrets`):
 * refused while the "secrets" feature is off, checked entry by entry.
 */
export function secretMapOf(
  field: "secrets" | "global_secrets",
  value: unknown,
  features: readonly Feature[],
  advice = "",
): Record<string, string> {
  if (value === undefined || value === null) return {}
  if (!features.includes("secrets")) {
    throw badRequest(
      `${field} are refused: the "secrets" feature is not enabled on this server (--allowed-features)${advice}`,
    )
  }
  if (typeof value !== "object" || Array.isArray(value)) {
    throw badRequest(`"${field}" must be an object of names to string values, for example {"API_TOKEN": "..."}`)
  }
  for (const [key, secret] of Object.entries(value)) assertSecretEntry(key, secret)
  return value as Record<string, string>
}

function driverOf(driver: unknown, rules: PipelineBodyRules): string {
  if (driver === undefined || driver === null || driver === "") return rules.defaultDriver
  if (typeof driver !== "string") throw badRequest('"driver" must be a string, the name of a driver')
  if (!rules.allowedDrivers.includes(driver)) {
    throw badRequest(`driver "${driver}" is not allowed on this server; allowed: ${rules.allowedDrivers.join(", ")}`)
  }
  return driver
}

function contentTypeOf(given: unknown, content: string): NonNullable<PipelineSpec["contentType"]> {
  if (given === undefined || given === null || given === "") return inferContentType(content)
  if (given === "ts" || given === "js" || given === "yaml") return given
  if (given === "yml") return "yaml"
  throw badRequest(`"content_type" ${JSON.stringify(given)} is not known; use ts, js or yaml (yml)`)
}
