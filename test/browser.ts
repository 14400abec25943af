import { existsSync, mkdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { type Browser, chromium, type Page } from "playwright-core"
import { root } from "./cli.ts"

// Debian's chromium, headless, driven by playwright-core: never a downloaded browser (.ci/run installs it).
export const chromiumPath = "/usr/bin/chromium"
const chromiumArgs = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]

/** Screenshots the browser tests leave behind (gitignored). */
export const artifacts = join(root, "test-artifacts")

export function launchChromium(): Promise<Browser> {
  if (!existsSync(chromiumPath)) {
    throw new Error(
      `no browser at ${chromiumPath}: install Debian's chromium (apt-get install chromium), as .ci/run does`,
    )
  }
  return chromium.launch({ executablePath: chromiumPath, headless: true, args: chromiumArgs })
}

/** Saves a full-page screenshot as test-artifacts/NAME.png. */
export async function screenshot(page: Page, name: string): Promise<string> {
  mkdirSync(artifacts, { recursive: true })
  const path = join(artifacts, `${name}.png`)
  await page.screenshot({ path, fullPage: true })
  return path
}

const axeSource = readFileSync(join(root, "node_modules/axe-core/axe.min.js"), "utf8")

export type AxeViolation = { id: string; impact: string; help: string; nodes: { target: string[] }[] }

/** axe-core's serious and critical violations on the page as it is now (WCAG 2.x A and AA rules). */
export async function seriousViolations(page: Page): Promise<{ id: string; help: string; targets: string[] }[]> {
  await page.addScriptTag({ content: axeSource })
  const violations = (await page.evaluate(async () => {
    // biome-ignore lint/suspicious/noExplicitAny: axe is the global the injected script defines.
    const result = await (globalThis as any).axe.run((globalThis as any).document, {
      runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"] },
    })
    return result.violations
  })) as AxeViolation[]
  return violations
    .filter((violation) => violation.impact === "serious" || violation.impact === "critical")
    .map((violation) => ({
      id: violation.id,
      help: violation.help,
      targets: violation.nodes.map((n) => n.target.join(" ")),
    }))
}
