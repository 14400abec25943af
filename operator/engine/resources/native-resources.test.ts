import { execFileSync } from "node:child_process"
import { createHash, randomBytes } from "node:crypto"
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, expect, it } from "vitest"
import { staticSecrets } from "../../../lib/secrets/secret-resolver.ts"
import { describeDocker, dockerHost } from "../../../test/docker.ts"
import { dockerDriverFactory } from "../../drivers/docker/docker-driver.ts"
import { scriptRunner } from "../script-run.fixture.ts"
import { gitHttpServer, gitIn } from "./git-server.fixture.ts"

// nativeResources from a real script run on the Docker driver (busybox), git
// against a real smart-HTTP server (`git http-backend`) on loopback.
describeDocker("nativeResources", () => {
  const dir = mkdtempSync(join(tmpdir(), "runnel-resources-test-"))
  const credentials = { username: "ci-bot", password: "git-password-value" }
  const secrets = staticSecrets({ GIT_USER: credentials.username, GIT_PASS: credentials.password })
  let runner: Awaited<ReturnType<typeof scriptRunner>>
  let server: Awaited<ReturnType<typeof gitHttpServer>>
  let first: string
  let second: string
  let source: Record<string, string>
  const resourceImage = `runnel-test-resource-${process.pid}:1`

  beforeAll(async () => {
    runner = await scriptRunner(dockerDriverFactory({ host: dockerHost }).create({}), "docker")
    const origin = join(dir, "repos", "app.git")
    mkdirSync(origin, { recursive: true })
    gitIn(origin, "init", "--bare", "-q", "-b", "main")
    gitIn(origin, "config", "http.receivepack", "true")
    const work = join(dir, "work")
    mkdirSync(work)
    gitIn(work, "init", "-q", "-b", "main")
    writeFileSync(join(work, "hello.txt"), "first version\n")
    gitIn(work, "add", ".")
    gitIn(work, "commit", "-q", "-m", "First commit")
    first = gitIn(work, "rev-parse", "HEAD")
    writeFileSync(join(work, "hello.txt"), "second version\n")
    mkdirSync(join(work, "bin"))
    writeFileSync(join(work, "bin", "run.sh"), "#!/bin/sh\necho ran\n", { mode: 0o755 })
    gitIn(work, "add", ".")
    gitIn(work, "commit", "-q", "-m", "Second commit\n\nWith a body.")
    second = gitIn(work, "rev-parse", "HEAD")
    gitIn(work, "push", "-q", origin, "main")
    server = await gitHttpServer(join(dir, "repos"), credentials)
    source = { uri: `${server.url}/app.git`, branch: "main", username: "secret:GIT_USER", password: "secret:GIT_PASS" }
  })
  afterAll(async () => {
    await server?.close()
    await runner?.close()
    rmSync(dir, { recursive: true, force: true })
    try {
      execFileSync("docker", ["rmi", "-f", resourceImage], { stdio: "ignore" })
    } catch {} // not built when its test did not run
  })

  it("checks, fetches into a volume a container task reads, and pushes a tag the server then has", async () => {
    const { result, events, output } = await runner.run(
      `export const pipeline = async () => {
        const source = ${JSON.stringify(source)}
        console.log(JSON.stringify(await nativeResources.check({ type: "git", source })))
        console.log(JSON.stringify(await nativeResources.check({ type: "git", source, version: { ref: "${first}" } })))
        const repo = volumes.create({ name: "repo" })
        const fetched = await nativeResources.fetch({ type: "git", source, version: { ref: "${second}" }, destDir: repo })
        console.log(JSON.stringify(fetched))
        const read = await runtime.run({ name: "read", image: "busybox", mounts: { "/repo": repo }, workDir: "/repo",
          command: { path: "sh", args: ["-c", "cat hello.txt && ./bin/run.sh && ls -a"] } })
        console.log(read.code, read.stdout.replace(/\\n/g, " "))
        const pushed = await nativeResources.push({ type: "git", source, params: { repository: repo, tag: "v1.0.0", only_tag: true } })
        console.log(JSON.stringify(pushed.version))
        await nativeResources.push({ type: "git", source: { ...source, branch: "release" }, params: { repository: { volume: repo } } })
      }`,
      { secrets },
    )
    expect(result.message).toBeNull()
    expect(result.status).toBe("success")
    const lines = output("pipeline/console").split("\n")
    expect(lines[0]).toBe(JSON.stringify([{ ref: second }]))
    expect(lines[1]).toBe(JSON.stringify([{ ref: first }, { ref: second }]))
    expect(JSON.parse(lines[2] as string)).toEqual({
      version: { ref: second },
      metadata: [
        { name: "commit", value: second },
        { name: "author", value: "Ada Author" },
        { name: "author_date", value: "2025-01-31T12:00:00.000Z" },
        { name: "committer", value: "Cy Committer" },
        { name: "committer_date", value: "2025-01-31T12:00:00.000Z" },
        { name: "branch", value: "main" },
        { name: "message", value: "Second commit\n\nWith a body." },
      ],
    })
    expect(lines.slice(3).join("\n")).toContain(
      `0 second version ran . .. .git bin hello.txt \n${JSON.stringify({ ref: second })}`,
    )
    expect(gitIn(join(dir, "repos", "app.git"), "rev-parse", "v1.0.0")).toBe(second)
    expect(gitIn(join(dir, "repos", "app.git"), "rev-parse", "refs/heads/release")).toBe(second)
    // Each operation is a task of the run, shown as it goes.
    expect(result.tasks.map((task) => [task.path, task.status])).toEqual([
      ["tasks/1/git-check", "success"],
      ["pipeline/console", "success"],
      ["tasks/2/git-check", "success"],
      ["tasks/3/git-fetch", "success"],
      ["tasks/4/read", "success"],
      ["tasks/5/git-push", "success"],
      ["tasks/6/git-push", "success"],
    ])
    expect(events).toContain("started tasks/3/git-fetch")
    expect(events).toContain("finished tasks/5/git-push success")
    expect(output("tasks/5/git-push")).toContain(`pushing tag v1.0.0 at ${second}`)
    // The credentials reached the server, never the output.
    expect(server.requests.some((line) => line.includes("git-receive-pack"))).toBe(true)
    expect(events.join("")).not.toContain(credentials.password)
  })

  it("answers a check only once its clone is done, and then removes the clone", async () => {
    // The clone is made in the system's temporary directory: here a private one, to see what is left in it.
    const scratch = mkdtempSync(join(dir, "tmp-"))
    const systemTmp = process.env.TMPDIR
    process.env.TMPDIR = scratch
    try {
      const { result, output } = await runner.run(
        `export const pipeline = async () => {
          console.log(JSON.stringify(await nativeResources.check({ type: "git", source: ${JSON.stringify(source)} })))
        }`,
        { secrets },
      )
      expect(result.message).toBeNull()
      expect(output("pipeline/console")).toBe(`${JSON.stringify([{ ref: second }])}\n`)
    } finally {
      if (systemTmp === undefined) delete process.env.TMPDIR
      else process.env.TMPDIR = systemTmp
    }
    // Removed while it was still being made, it came back afterwards (or the check failed, cut short).
    expect(readdirSync(scratch)).toEqual([])
  })

  it("fetches the branch's newest commit into a path inside a volume", async () => {
    const { result, output } = await runner.run(
      `export const pipeline = async () => {
        const work = volumes.create()
        const fetched = await nativeResources.fetch({ type: "git", source: ${JSON.stringify(source)}, destDir: { volume: work, path: "src/app" } })
        const read = await runtime.run({ name: "read", image: "busybox", mounts: { "/w": work }, workDir: "/w",
          command: { path: "cat", args: ["src/app/hello.txt"] } })
        console.log(fetched.version.ref, read.stdout.trim())
      }`,
      { secrets },
    )
    expect(result.status).toBe("success")
    expect(output("pipeline/console")).toBe(`${second} second version\n`)
  })

  it("fetches a repository larger than one task's environment carries, intact", async () => {
    const origin = join(dir, "repos", "big.git")
    mkdirSync(origin, { recursive: true })
    gitIn(origin, "init", "--bare", "-q", "-b", "main")
    const work = join(dir, "big-work")
    mkdirSync(work)
    gitIn(work, "init", "-q", "-b", "main")
    const content = randomBytes(2 * 1024 * 1024)
    writeFileSync(join(work, "big.bin"), content)
    gitIn(work, "add", ".")
    gitIn(work, "commit", "-q", "-m", "Big file")
    gitIn(work, "push", "-q", origin, "main")
    const { result, output } = await runner.run(
      `export const pipeline = async () => {
        const big = volumes.create()
        await nativeResources.fetch({ type: "git", source: ${JSON.stringify({ ...source, uri: `${server.url}/big.git` })}, destDir: big })
        const sum = await runtime.run({ name: "sum", image: "busybox", mounts: { "/b": big }, workDir: "/b", command: { path: "md5sum", args: ["big.bin"] } })
        console.log(sum.stdout.trim())
      }`,
      { secrets },
    )
    expect(result.status).toBe("success")
    expect(output("pipeline/console")).toBe(`${createHash("md5").update(content).digest("hex")}  big.bin\n`)
  })

  it("runs Concourse's mock resource: check, fetch into a volume, push", async () => {
    const { result, output } = await runner.run(
      `export const pipeline = async () => {
        const source = { initial_version: "v0", create_files: { "notes/readme.txt": "from mock" }, metadata: [{ name: "by", value: "mock" }] }
        console.log(JSON.stringify(await nativeResources.check({ type: "mock", source })))
        const out = volumes.create()
        const fetched = await nativeResources.fetch({ type: "mock", source, version: { version: "v7" }, destDir: out })
        const read = await runtime.run({ name: "read", image: "busybox", mounts: { "/o": out }, workDir: "/o",
          command: { path: "sh", args: ["-c", "cat version notes/readme.txt"] } })
        console.log(JSON.stringify(fetched), read.stdout.replace(/\\n/g, "|"))
        console.log(JSON.stringify(await nativeResources.push({ type: "mock", source, params: { version: "v8" } })))
      }`,
    )
    expect(result.status).toBe("success")
    expect(output("pipeline/console").split("\n")).toEqual([
      JSON.stringify([{ version: "v0" }]),
      `${JSON.stringify({ version: { version: "v7" }, metadata: [{ name: "by", value: "mock" }] })} v7|from mock`,
      JSON.stringify({ version: { version: "v8" }, metadata: [{ name: "by", value: "mock" }] }),
      "",
    ])
    expect(result.tasks.map((task) => task.path)).toEqual([
      "tasks/1/mock-check",
      "pipeline/console",
      "tasks/2/mock-fetch",
      "tasks/3/read",
      "tasks/4/mock-push",
    ])
  })

  it("runs any other type through the Concourse resource protocol in its image, with secrets resolved in nested source and params", async () => {
    // A resource type of our own, built from the local busybox image (no registry here).
    const context = join(dir, "resource-image")
    mkdirSync(join(context, "opt", "resource"), { recursive: true })
    const script = (body: string) => `#!/bin/sh\nrequest=$(cat)\n${body}\n`
    writeFileSync(
      join(context, "opt", "resource", "check"),
      script(`case "$request" in *'"v":"1"'*) echo '[{"v":"1"},{"v":"2"}]' ;; *) echo '[{"v":"2"}]' ;; esac`),
      { mode: 0o755 },
    )
    writeFileSync(
      join(context, "opt", "resource", "in"),
      script(
        `echo "fetching into $1" >&2\nprintf '%s' "$request" > "$1/request.json"\necho '{"version":{"v":"2"},"metadata":[{"name":"by","value":"test-resource"}]}'`,
      ),
      { mode: 0o755 },
    )
    writeFileSync(
      join(context, "opt", "resource", "out"),
      script(
        `echo "inputs: $(ls "$1")" >&2\nprintf '{"version":{"v":"3","seen":"%s"}}\\n' "$(wc -c < "$1/input/sub/request.json" | tr -d ' ')"`,
      ),
      { mode: 0o755 },
    )
    writeFileSync(join(context, "Dockerfile"), "FROM busybox\nCOPY opt /opt\n")
    execFileSync("docker", ["build", "-q", "-t", resourceImage, context], { stdio: "ignore" })
    const { result, output } = await runner.run(
      `export const pipeline = async () => {
        const type = { type: "custom", image: "${resourceImage}" }
        const source = { token: "secret:GIT_PASS", nested: [{ k: "secret:GIT_PASS" }, 5, true], plain: "secret-less" }
        console.log(JSON.stringify(await nativeResources.check({ ...type, source, version: { v: "1" } })))
        const dest = volumes.create({ name: "dest" })
        const got = await nativeResources.fetch({ ...type, source, params: { p: "secret:GIT_USER" }, destDir: { volume: dest, path: "sub" } })
        console.log(JSON.stringify(got))
        const read = await runtime.run({ name: "read", image: "busybox", mounts: { "/d": dest }, workDir: "/d",
          command: { path: "sh", args: ["-c", "sed -e s/git-password-value/PASSWORD/g -e s/ci-bot/USER/g sub/request.json"] } })
        console.log(read.stdout)
        console.log(JSON.stringify(await nativeResources.push({ ...type, source, inputs: { input: dest } })))
      }`,
      { secrets },
    )
    expect(result.message).toBeNull()
    expect(output("pipeline/console").split("\n")).toEqual([
      JSON.stringify([{ v: "1" }, { v: "2" }]),
      JSON.stringify({ version: { v: "2" }, metadata: [{ name: "by", value: "test-resource" }] }),
      JSON.stringify({
        source: { token: "PASSWORD", nested: [{ k: "PASSWORD" }, 5, true], plain: "secret-less" },
        version: { v: "2" },
        params: { p: "USER" },
      }),
      expect.stringMatching(/^\{"version":\{"v":"3","seen":"\d+"\},"metadata":\[\]\}$/),
      "",
    ])
    expect(output("tasks/2/custom-fetch", "stderr")).toContain("fetching into /tmp/build/get/sub\n")
    expect(output("tasks/4/custom-push", "stderr")).toContain("inputs: input\n")
  })

  it("rejects an unknown type, a git source without uri and a bad destDir with messages the script can catch", async () => {
    const { result, output } = await runner.run(
      `export const pipeline = async () => {
        for (const call of [
          () => nativeResources.check({ type: "svn", source: {} }),
          () => nativeResources.check({ type: "git", source: { branch: "main" } }),
          () => nativeResources.check({ type: "git", source: { uri: "git@github.com:org/repo.git" } }),
          () => nativeResources.fetch({ type: "git", source: { uri: "${server.url}/app.git" } }),
          () => nativeResources.fetch({ type: "mock", destDir: "/tmp" }),
          () => nativeResources.check("git"),
          () => nativeResources.check({ type: "my/type", image: "busybox" }),
          () => nativeResources.check({ type: "git", source: { uri: "${server.url}/missing.git", username: "ci-bot", password: "git-password-value" } }),
        ]) {
          try { await call(); console.log("accepted") } catch (error) { console.log(error.name + ": " + error.message) }
        }
      }`,
      { secrets },
    )
    expect(result.status).toBe("success")
    const lines = output("pipeline/console").split("\n")
    expect(lines[0]).toBe(
      'Error: nativeResources: unknown resource type "svn"; known: mock, git, registry-image, docker-image, time, s3, semver, github-release, pool, hg, cf, bosh-io-release, bosh-io-stemcell, tracker; for another Concourse resource type give its image too, such as { type: "svn", image: "org/svn-resource" }',
    )
    expect(lines[1]).toBe(
      'Error: git source needs uri, the repository\'s http(s) URL, such as "https://github.com/org/repo.git"',
    )
    expect(lines[2]).toBe(
      'Error: git source uri "git@github.com:org/repo.git": runnel\'s native git speaks http and https only; use the https URL with username and password',
    )
    expect(lines[3]).toBe(
      "Error: nativeResources.fetch: destDir is required, a volume from volumes.create() or { volume, path }",
    )
    expect(lines[4]).toBe(
      'TypeError: nativeResources.fetch: destDir must be a volume from volumes.create() or { volume, path }, got "/tmp"',
    )
    expect(lines[5]).toContain("TypeError: nativeResources.check: expected an object")
    expect(lines[6]).toBe(
      'Error: nativeResources: type must be a resource type such as "git", "mock" or "s3", not "my/type"',
    )
    expect(lines[7]).toMatch(/^Error: .*404/)
    // The missing repository was a task that failed; the refused calls before it recorded none.
    expect(result.tasks.map((task) => [task.path, task.status])).toEqual([
      ["pipeline/console", "success"],
      ["tasks/1/git-check", "failure"],
    ])
    expect(output("tasks/1/git-check", "stderr")).toMatch(/404/)
    expect(output("tasks/1/git-check", "stderr")).not.toContain("git-password-value")
  })

  it("refuses git when the fetch feature is off, and sends nothing", async () => {
    const before = server.requests.length
    const { result, output } = await runner.run(
      `export const pipeline = async () => {
        try { await nativeResources.check({ type: "git", source: { uri: "${server.url}/app.git" } }) } catch (error) { console.log(error.message) }
      }`,
      { network: { fetch: false } },
    )
    expect(result.status).toBe("success")
    expect(output("pipeline/console")).toBe(
      "nativeResources: fetch feature is not enabled; git reaches the network from runnel's operator, as fetch() does\n",
    )
    expect(server.requests.length).toBe(before)
  })

  it("ends the run as an error naming a missing secret in source", async () => {
    const { result } = await runner.run(
      `export const pipeline = async () => {
        try { await nativeResources.check({ type: "git", source: { uri: "${server.url}/app.git", password: "secret:NOPE" } }) } catch {}
      }`,
    )
    expect(result.status).toBe("error")
    expect(result.message).toContain(
      'secret "NOPE" is not set: nativeResources.check (tasks/1/git-check) source.password asks for it',
    )
  })
})
