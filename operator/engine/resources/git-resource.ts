import * as fs from "node:fs"
import git, { type GitAuth, type HttpClient } from "isomorphic-git"
import { type OutboundPolicy, sendOutbound } from "../outbound.ts"

/**
 * Concourse's git resource (github.com/concourse/git-resource), done in the
 * operator with isomorphic-git over http(s), the same outbound rules as
 * fetch() applying (no metadata addresses). What it reads of `source`: `uri`,
 * `branch` (default: the remote's HEAD), `username` and `password` for HTTP
 * authentication; versions are `{ref: <commit sha>}`.
 * Departures: no ssh (`private_key`), no `paths`/`ignore_paths` filtering, no
 * submodules, no commit signing; `tag` in a push is the tag's name itself,
 * not a file holding it (a script has the value).
 */
export type GitSource = {
  readonly uri: string
  readonly branch: string | undefined
  readonly auth: GitAuth | undefined
}

export type GitDeps = {
  readonly policy: OutboundPolicy
  readonly signal: AbortSignal
  /** A line of progress for the operation's task output. */
  readonly progress: (line: string) => void
}

export type Version = Readonly<Record<string, string>>
export type MetadataField = { readonly name: string; readonly value: string }

/** Timeout of one HTTP exchange with the git server, and the largest answer (a pack) runnel takes. */
const gitLimits = { timeoutMs: 120_000, maxResponseBytes: 512 * 1024 * 1024 }

/** `source` checked: a clear message the script can catch when `uri` is missing or not http(s). */
export function gitSource(source: Readonly<Record<string, unknown>>): GitSource {
  const { uri, branch, username, password, private_key: privateKey } = source
  if (typeof uri !== "string" || uri === "") {
    throw new Error('git source needs uri, the repository\'s http(s) URL, such as "https://github.com/org/repo.git"')
  }
  if (privateKey !== undefined || /^(ssh:\/\/|[\w.-]+@[\w.-]+:)/.test(uri)) {
    throw new Error(
      `git source uri ${JSON.stringify(uri)}: runnel's native git speaks http and https only; use the https URL with username and password`,
    )
  }
  if (!/^https?:\/\//.test(uri)) throw new Error(`git source uri ${JSON.stringify(uri)} is not an http or https URL`)
  if (branch !== undefined && (typeof branch !== "string" || branch === "")) {
    throw new Error(`git source branch must be a branch name such as "main", not ${JSON.stringify(branch)}`)
  }
  const auth =
    typeof username === "string" || typeof password === "string"
      ? { username: String(username ?? ""), password: String(password ?? "") }
      : undefined
  return { uri, branch: branch as string | undefined, auth }
}

/** An isomorphic-git HTTP client whose every request goes through the outbound rules. */
function gitHttp(deps: GitDeps): HttpClient {
  return {
    async request({ url, method = "GET", headers = {}, body }) {
      const chunks: Uint8Array[] = []
      if (body !== undefined) for await (const chunk of body) chunks.push(chunk)
      const response = await sendOutbound(
        {
          url,
          method,
          headers: Object.entries(headers),
          ...(chunks.length === 0 ? {} : { body: Buffer.concat(chunks) }),
          timeoutMs: gitLimits.timeoutMs,
          maxRedirects: 5,
          maxResponseBytes: gitLimits.maxResponseBytes,
          sizeLimitName: "the git answer limit",
          signal: deps.signal,
        },
        deps.policy,
      )
      const answer = response.body
      return {
        url: response.url,
        method,
        statusCode: response.status,
        statusMessage: response.statusText,
        headers: Object.fromEntries(response.headers),
        body: (async function* () {
          yield new Uint8Array(answer)
        })(),
      }
    },
  }
}

function remote(source: GitSource, deps: GitDeps) {
  return {
    fs,
    http: gitHttp(deps),
    url: source.uri,
    ...(source.auth === undefined ? {} : { onAuth: () => source.auth as GitAuth }),
  }
}

/** Clones the branch (all its history, no checkout) into `dir`; answers the branch's name. */
async function cloneBranch(source: GitSource, dir: string, deps: GitDeps): Promise<string> {
  deps.progress(`cloning ${source.uri}${source.branch === undefined ? "" : ` (branch ${source.branch})`}`)
  await git.clone({
    ...remote(source, deps),
    dir,
    singleBranch: true,
    noCheckout: true,
    noTags: true,
    ...(source.branch === undefined ? {} : { ref: source.branch }),
  })
  return source.branch ?? (await git.currentBranch({ fs, dir })) ?? "HEAD"
}

/**
 * The commits of the branch from `version` on, oldest first, as Concourse's
 * check answers: only the newest without a version, or when `version` is no
 * longer in the branch's history.
 */
export async function gitCheck(
  source: GitSource,
  version: Version | undefined,
  dir: string,
  deps: GitDeps,
): Promise<Version[]> {
  const branch = await cloneBranch(source, dir, deps)
  const commits = await git.log({ fs, dir, ref: branch })
  const newest = commits[0]
  if (newest === undefined) return []
  const since = version?.ref === undefined ? -1 : commits.findIndex((commit) => commit.oid === version.ref)
  const picked = since < 0 ? [newest] : commits.slice(0, since + 1)
  deps.progress(`${picked.length} version(s) of ${branch}`)
  return picked.reverse().map((commit) => ({ ref: commit.oid }))
}

/** Checks out `version` (the branch's newest without one) into `dir`, `.git` included; answers the version and its metadata. */
export async function gitFetch(
  source: GitSource,
  version: Version | undefined,
  dir: string,
  deps: GitDeps,
): Promise<{ version: Version; metadata: MetadataField[] }> {
  const branch = await cloneBranch(source, dir, deps)
  const oid = version?.ref ?? (await git.resolveRef({ fs, dir, ref: branch }))
  try {
    await git.checkout({ fs, dir, ref: oid, force: true })
  } catch (error) {
    throw new Error(`commit ${oid} is not on branch ${branch} of ${source.uri}: ${(error as Error).message}`)
  }
  deps.progress(`checked out ${oid}`)
  const { commit } = await git.readCommit({ fs, dir, oid })
  const when = (seconds: number) => new Date(seconds * 1000).toISOString()
  return {
    version: { ref: oid },
    metadata: [
      { name: "commit", value: oid },
      { name: "author", value: commit.author.name },
      { name: "author_date", value: when(commit.author.timestamp) },
      { name: "committer", value: commit.committer.name },
      { name: "committer_date", value: when(commit.committer.timestamp) },
      { name: "branch", value: branch },
      { name: "message", value: commit.message.trim() },
    ],
  }
}

/**
 * Pushes the repository in `dir` (a clone, as gitFetch leaves one): its HEAD
 * to the source's branch unless `only_tag`, and with `tag` a lightweight tag
 * of HEAD. Answers the version pushed: `{ref: <HEAD>}`.
 */
export async function gitPush(
  source: GitSource,
  params: Readonly<Record<string, unknown>>,
  dir: string,
  deps: GitDeps,
): Promise<Version> {
  const { tag, only_tag: onlyTag, force } = params
  if (tag !== undefined && (typeof tag !== "string" || tag === "")) {
    throw new Error(`git push: params.tag must be the tag's name, such as "v1.2.0", not ${JSON.stringify(tag)}`)
  }
  if (onlyTag === true && tag === undefined) throw new Error("git push: params.only_tag needs params.tag")
  if (onlyTag !== true && source.branch === undefined) {
    throw new Error("git push: source.branch names the branch to push to (or push only a tag with only_tag: true)")
  }
  let head: string
  try {
    head = await git.resolveRef({ fs, dir, ref: "HEAD" })
  } catch {
    throw new Error("git push: params.repository holds no git repository; fetch one into that volume first")
  }
  if (onlyTag !== true) {
    deps.progress(`pushing ${head} to ${source.branch}`)
    await pushed(
      git.push({
        ...remote(source, deps),
        dir,
        ref: head,
        remoteRef: `refs/heads/${source.branch}`,
        force: force === true,
      }),
      `branch ${source.branch}`,
    )
  }
  if (typeof tag === "string") {
    await git.tag({ fs, dir, ref: tag, object: head, force: true })
    deps.progress(`pushing tag ${tag} at ${head}`)
    await pushed(
      git.push({ ...remote(source, deps), dir, ref: `refs/tags/${tag}`, remoteRef: `refs/tags/${tag}` }),
      `tag ${tag}`,
    )
  }
  return { ref: head }
}

async function pushed(result: ReturnType<typeof git.push>, what: string): Promise<void> {
  const answer = await result
  const refused = Object.entries(answer.refs ?? {}).find(([, status]) => !status.ok)
  if (!answer.ok || refused !== undefined) {
    throw new Error(`the server refused ${what}: ${refused?.[1].error ?? answer.error ?? "no reason given"}`)
  }
}
