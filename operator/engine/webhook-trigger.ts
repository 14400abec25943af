import {
  compileExpression,
  type Expression,
  ExpressionError,
  type WebhookVariables,
  webhookPayload,
} from "../../lib/cel/expression.ts"
import { errorMessage } from "../../lib/core/errors.ts"
import type { WebhookRequest } from "../../lib/core/webhook-request.ts"

/** Distinct expressions a run keeps compiled; a script that builds them in a loop compiles the rest each time. */
const maxCachedExpressions = 256

/** An expression as it appears in a message: long ones are cut. */
function quoted(source: string): string {
  return JSON.stringify(source.length > 120 ? `${source.slice(0, 120)}...` : source)
}

/**
 * The host side of the script's `webhookTrigger(expression)` for one run
 * (interface.md "Conditional execution"). Expressions are compiled here, not
 * in the isolate, once per distinct source.
 * - Not started by a webhook (`request` undefined): true, without evaluating.
 * - Otherwise the expression's value against the request.
 * - An invalid expression is false (true outside webhook runs, where nothing
 *   is evaluated) and `report` gets a line naming the mistake and its position;
 *   so is an evaluation error, which counts as false. Never throws.
 */
export function webhookTrigger(
  request: WebhookRequest | undefined,
  report: (line: string) => void,
): (source: string) => boolean {
  const compiled = new Map<string, Expression<"webhook"> | ExpressionError>()
  let variables: WebhookVariables | undefined
  const compile = (source: string) => {
    let expression = compiled.get(source)
    if (expression !== undefined) return expression
    try {
      expression = compileExpression("webhook", source)
    } catch (error) {
      expression =
        error instanceof ExpressionError
          ? error
          : new ExpressionError("invalid_expression", `invalid expression: ${errorMessage(error)}`)
    }
    if (compiled.size < maxCachedExpressions) compiled.set(source, expression)
    return expression
  }
  return (source) => {
    const expression = compile(source)
    if (expression instanceof ExpressionError) {
      // Said in every run, so a mistake shows when the pipeline is tried by hand too.
      report(
        `webhookTrigger(${quoted(source)}) is ${request === undefined ? "true (not a webhook run)" : "false"}: ${expression.message}`,
      )
      return request === undefined
    }
    if (request === undefined) return true
    variables ??= {
      provider: request.provider,
      eventType: request.eventType,
      method: request.method,
      body: request.body,
      headers: request.headers,
      query: request.query,
      payload: webhookPayload(request.body),
    }
    return expression.evaluate(variables, (error) =>
      report(`webhookTrigger(${quoted(source)}) is false: ${error.message}`),
    )
  }
}
