import { chmodSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { describe, expect, it } from "vitest"
import { apiserverFlags, apiserverSettings } from "./apiserver.ts"
import { saveToken } from "./auth-config.ts"
import { clientSettings } from "./client.ts"
import { operatorSettings } from "./operator.ts"
import { runnerSettings } from "./runner.ts"
import { serverSettings } from "./server.ts"

const drivers = ["docker", "native"]
const env = { PATH: "/bin", HOME: "/nonexistent", KUBECONFIG: "/etc/kube.yaml" }

describe("settings per role", () => {
  it("are frozen all the way down", () => {
    const settings = serverSettings({ secret: ["A=1"] }, drivers, env)
    expect(Object.isFrozen(settings)).toBe(true)
    expect(Object.isFrozen(settings.http)).toBe(true)
    expect(Object.isFrozen(settings.limits)).toBe(true)
    expect(Object.isFrozen(settings.secrets)).toBe(true)
    expect(Object.isFrozen(settings.host)).toBe(true)
  })

  it("serve metrics only with --metrics-port, on --host, for every serving role", () => {
    expect(serverSettings({}, drivers, env).metrics).toBeUndefined()
    expect(serverSettings({ metricsPort: "9090", host: "0.0.0.0" }, drivers, env).metrics).toEqual({
      port: 9090,
      host: "0.0.0.0",
    })
    expect(apiserverSettings({}, drivers, { ...env, CI_METRICS_PORT: "0" }).metrics).toEqual({
      port: 0,
      host: "127.0.0.1",
    })
    expect(operatorSettings({ metricsPort: "9091" }, drivers, env).metrics).toEqual({ port: 9091, host: "127.0.0.1" })
    expect(() => serverSettings({ metricsPort: "nine" }, drivers, env)).toThrow(/--metrics-port/)
    expect(() => serverSettings({ metricsPort: "8080" }, drivers, env)).toThrow(
      /--metrics-port 8080 is the --port the API serves on/,
    )
  })

  it("read a flag, then its CI_* variable, then the default", () => {
    expect(serverSettings({ port: "9000" }, drivers, { ...env, CI_PORT: "9001" }).http.port).toBe(9000)
    expect(serverSettings({}, drivers, { ...env, CI_PORT: "9001" }).http.port).toBe(9001)
    expect(serverSettings({}, drivers, env)).toMatchObject({
      http: { port: 8080, host: "127.0.0.1" },
      api: {
        maxQueueSize: 100,
        maxBodyBytes: 10 * 1024 * 1024,
        webhookTimeoutMs: 5000,
        webhookMaxAgeMs: 300_000,
        mcpAllowActions: false,
      },
      namespace: "default",
      storagePath: "runnel.db",
      logStorePath: "runnel-logs.db",
      kube: { kind: "embedded" },
      maxInFlight: 10,
      shutdownGraceMs: 30_000,
    })
  })

  it("serve TLS with both --tls-cert-file and --tls-private-key-file, or refuse one alone", () => {
    expect(serverSettings({}, drivers, env).http.tls).toBeUndefined()
    expect(
      serverSettings({}, drivers, { ...env, CI_TLS_CERT_FILE: "c.pem", CI_TLS_PRIVATE_KEY_FILE: "k.pem" }).http.tls,
    ).toEqual({ certFile: "c.pem", keyFile: "k.pem" })
    expect(() => serverSettings({ tlsCertFile: "c.pem" }, drivers, env)).toThrow(
      "--tls-cert-file and --tls-private-key-file go together; --tls-private-key-file is missing",
    )
  })

  it("check runnel apiserver's own flags without the operator's table", () => {
    expect(apiserverFlags.map((flag) => flag.name)).not.toContain("max-in-flight")
    const settings = apiserverSettings({ kubeconfig: "k.yaml", driver: "native" }, drivers, env)
    expect(settings).toMatchObject({ kube: { kind: "files", files: ["k.yaml"] }, driver: "native" })
    expect(settings).not.toHaveProperty("maxInFlight")
    expect(() => apiserverSettings({ driver: "podman" }, drivers, env)).toThrow(
      'unknown driver "podman"; known: docker, native',
    )
    expect(() => apiserverSettings({ driver: "docker", allowedDrivers: "native" }, drivers, env)).toThrow(
      "--driver docker is not among --allowed-drivers native",
    )
  })

  it("pick one authentication mode, and refuse to start with both or with OAuth's required flags missing", () => {
    const github = { oauthGithubClientId: "id", oauthGithubClientSecret: "secret" }
    const oauth = { ...github, oauthSessionSecret: "s".repeat(32), oauthCallbackUrl: "https://ci.example/" }
    expect(serverSettings({}, drivers, env).api.auth).toEqual({ mode: "open" })
    expect(serverSettings({ basicAuthUsername: "a", basicAuthPassword: "b" }, drivers, env).api.auth).toEqual({
      mode: "basic",
      username: "a",
      password: "b",
    })
    expect(
      serverSettings({}, drivers, { ...env, CI_BASIC_AUTH_USERNAME: "a", CI_BASIC_AUTH_PASSWORD: "b" }).api.auth.mode,
    ).toBe("basic")
    expect(serverSettings(oauth, drivers, env).api.auth).toMatchObject({
      mode: "oauth",
      callbackUrl: "https://ci.example",
    })
    expect(() => serverSettings({ ...oauth, basicAuthUsername: "a", basicAuthPassword: "b" }, drivers, env)).toThrow(
      /Basic Auth \(--basic-auth-username\) and OAuth \(--oauth-github-client-id\) are both configured/,
    )
    expect(() => serverSettings({ ...github, oauthCallbackUrl: "https://ci.example" }, drivers, env)).toThrow(
      "OAuth is configured (github) but --oauth-session-secret is missing",
    )
    expect(() => serverSettings({ ...github, oauthSessionSecret: "s".repeat(32) }, drivers, env)).toThrow(
      "OAuth is configured (github) but --oauth-callback-url is missing",
    )
  })

  it("leave native out of --allowed-drivers * once authentication is on, and warn when it is named", () => {
    const basic = { basicAuthUsername: "a", basicAuthPassword: "b" }
    expect(serverSettings({}, drivers, env)).toMatchObject({ allowedDrivers: "*", warnings: [] })
    expect(serverSettings(basic, drivers, env)).toMatchObject({ allowedDrivers: ["docker"], warnings: [] })
    expect(() => serverSettings({ ...basic, driver: "native" }, drivers, env)).toThrow(
      /--driver native is not among --allowed-drivers docker; with authentication on, \* leaves out native .* --allowed-drivers \*,native/,
    )
    const named = apiserverSettings({ ...basic, allowedDrivers: "*,native" }, drivers, env)
    expect(named.allowedDrivers).toEqual(["docker", "native"])
    expect(named.warnings).toEqual([
      expect.stringMatching(/^runnel: WARNING: --allowed-drivers names native with authentication on/),
    ])
    expect(operatorSettings({ allowedDrivers: "*" }, drivers, env).allowedDrivers).toBe("*")
  })

  it("warn about a session secret under 32 characters, and a --server-rbac that open access ignores", () => {
    const oauth = { oauthGithubClientId: "id", oauthGithubClientSecret: "x", oauthCallbackUrl: "https://ci.example" }
    expect(serverSettings({ ...oauth, oauthSessionSecret: "short" }, drivers, env).warnings).toEqual([
      expect.stringMatching(/^runnel: WARNING: --oauth-session-secret is 5 characters; .* 32 or more/),
    ])
    expect(serverSettings({ ...oauth, oauthSessionSecret: "s".repeat(32) }, drivers, env).warnings).toEqual([])
    expect(serverSettings({ serverRbac: "true" }, drivers, env).warnings).toEqual([
      "runnel: WARNING: --server-rbac has no effect without authentication (Basic Auth or OAuth)",
    ])
  })

  it("resolve the operator's Kubernetes API by the one policy: here $KUBECONFIG", () => {
    expect(operatorSettings({}, drivers, env).kube).toEqual({
      kind: "files",
      files: ["/etc/kube.yaml"],
      from: '$KUBECONFIG "/etc/kube.yaml"',
    })
  })

  it("give the kubernetes driver's claims a storage class, size and access mode, or refuse a bad one naming its flag", () => {
    expect(operatorSettings({}, drivers, env).taskVolumes).toEqual({
      storageClass: undefined,
      size: "1Gi",
      accessMode: "ReadWriteOnce",
    })
    const given = { taskVolumeStorageClass: "fast", taskVolumeSize: "500Mi", taskVolumeAccessMode: "ReadWriteMany" }
    expect(serverSettings(given, drivers, env).taskVolumes).toEqual({
      storageClass: "fast",
      size: "500Mi",
      accessMode: "ReadWriteMany",
    })
    expect(serverSettings({}, drivers, { ...env, CI_TASK_VOLUME_STORAGE_CLASS: "nfs" }).taskVolumes.storageClass).toBe(
      "nfs",
    )
    expect(() => serverSettings({ taskVolumeSize: "1 GB" }, drivers, env)).toThrow(
      '--task-volume-size "1 GB" is not a Kubernetes quantity such as 1Gi or 500Mi',
    )
    expect(() => serverSettings({ taskVolumeAccessMode: "rwx" }, drivers, env)).toThrow(
      '--task-volume-access-mode "rwx" is not a mode; use ReadWriteOnce or ReadWriteMany',
    )
  })

  it("give the runner its driver, limits and secrets", () => {
    expect(runnerSettings({ driver: "native", secret: ["K=V"], pipelineTimeout: "2s" }, drivers, env)).toMatchObject({
      driver: "native",
      secrets: { K: "V" },
      storagePath: undefined,
      limits: { memoryMb: 128, timeoutMs: 2000 },
      mockImage: "busybox",
    })
  })

  it("give the operator and the runner what fetch(), notifications and git may reach", () => {
    expect(serverSettings({}, drivers, env).network).toEqual({
      fetch: true,
      notifications: true,
      slackApiUrl: "https://slack.com/api",
      fetchMaxResponseBytes: 10 * 1024 * 1024,
      allowMetadataAddresses: false,
    })
    expect(
      operatorSettings({ allowedFeatures: "webhooks", slackApiUrl: "http://127.0.0.1:9/api" }, drivers, {
        ...env,
        CI_FETCH_MAX_RESPONSE_MB: "2",
        CI_ALLOW_METADATA_ADDRESSES: "true",
      }).network,
    ).toEqual({
      fetch: false,
      notifications: false,
      slackApiUrl: "http://127.0.0.1:9/api",
      fetchMaxResponseBytes: 2 * 1024 * 1024,
      allowMetadataAddresses: true,
    })
    expect(runnerSettings({ allowMetadataAddresses: true }, drivers, env).network).toMatchObject({
      fetch: true,
      notifications: true,
      allowMetadataAddresses: true,
    })
    expect(() => serverSettings({ slackApiUrl: "slack.com" }, drivers, env)).toThrow(
      '--slack-api-url "slack.com" is not an http or https URL',
    )
    expect(() => serverSettings({ fetchMaxResponseMb: "0" }, drivers, env)).toThrow(
      '--fetch-max-response-mb must be a positive whole number, not "0"',
    )
  })

  it("refuse privileged tasks unless --allow-privileged-tasks or its variable allows them", () => {
    expect(serverSettings({}, drivers, env).allowPrivilegedTasks).toBe(false)
    expect(serverSettings({ allowPrivilegedTasks: true }, drivers, env).allowPrivilegedTasks).toBe(true)
    expect(operatorSettings({}, drivers, { ...env, CI_ALLOW_PRIVILEGED_TASKS: "1" }).allowPrivilegedTasks).toBe(true)
    expect(runnerSettings({ allowPrivilegedTasks: true }, drivers, env).allowPrivilegedTasks).toBe(true)
    expect(() => serverSettings({}, drivers, { ...env, CI_ALLOW_PRIVILEGED_TASKS: "yes" })).toThrow(
      '--allow-privileged-tasks is a switch; its variable CI_ALLOW_PRIVILEGED_TASKS is true, 1, false or 0, not "yes"',
    )
  })

  it("give a client its URL without credentials and its Authorization header", () => {
    const home = { HOME: "/nonexistent" }
    expect(clientSettings({ serverUrl: "http://me:pw@host:8080/" }, home)).toMatchObject({
      url: "http://host:8080",
      authorization: `Basic ${Buffer.from("me:pw").toString("base64")}`,
      authConfigPath: "/nonexistent/.runnel/auth.config",
    })
    expect(clientSettings({ authToken: "t" }, { ...home, CI_SERVER_URL: "https://ci.example" })).toMatchObject({
      url: "https://ci.example",
      authorization: "Bearer t",
    })
    expect(() => clientSettings({ serverUrl: "ftp://x" }, home)).toThrow(
      '--server-url "ftp://x" must start with http://',
    )
  })

  it("take a token from --auth-token, then the auth config's entry for the URL, then the URL's user:password@", () => {
    const dir = mkdtempSync(join(tmpdir(), "runnel-auth-config-"))
    const file = join(dir, "nested", "auth.config")
    saveToken(file, "http://host:8080", "stored")
    expect(statSync(file).mode & 0o777).toBe(0o600)
    const env = { HOME: "/nonexistent", CI_AUTH_CONFIG: file }
    expect(clientSettings({ serverUrl: "http://me:pw@host:8080" }, env).authorization).toBe("Bearer stored")
    expect(clientSettings({ serverUrl: "http://me:pw@host:8080", authToken: "flag" }, env).authorization).toBe(
      "Bearer flag",
    )
    expect(clientSettings({ serverUrl: "http://me:pw@other:8080" }, env).authorization).toBe(
      `Basic ${Buffer.from("me:pw").toString("base64")}`,
    )
    expect(clientSettings({ serverUrl: "http://host:8080" }, env).warnings).toEqual([])
    chmodSync(file, 0o644)
    expect(clientSettings({ serverUrl: "http://host:8080" }, env).warnings).toEqual([
      `runnel: WARNING: ${file} is readable by others (mode 0644); its tokens log in as you: chmod 600 ${file}`,
    ])
    saveToken(file, "http://host:8080", undefined)
    expect(statSync(file).mode & 0o777).toBe(0o600)
    expect(clientSettings({ serverUrl: "http://host:8080" }, env).authorization).toBeUndefined()
    writeFileSync(file, "not json")
    expect(() => clientSettings({ serverUrl: "http://host:8080", authConfig: file }, {})).toThrow(
      `the auth config ${file} is not JSON; delete it and run runnel login again`,
    )
    rmSync(dir, { recursive: true })
  })
})

describe("S3 secrets settings", () => {
  const key = Buffer.alloc(32, 7).toString("base64")

  it("select S3 when the bucket is set, from flags or CI_SECRETS_S3_* or the neutral spellings", () => {
    expect(serverSettings({}, drivers, env).s3Secrets).toBeUndefined()
    expect(
      serverSettings(
        { secretsS3Bucket: "team-secrets", secretsS3Endpoint: "http://127.0.0.1:9000", secretsS3Encrypt: "sse-s3" },
        drivers,
        { ...env, CI_SECRETS_S3_PREFIX: "ci", CI_SECRETS_S3_PASSPHRASE: "pp" },
      ).s3Secrets,
    ).toEqual({
      bucket: "team-secrets",
      endpoint: "http://127.0.0.1:9000",
      region: undefined,
      credentials: undefined,
      passphrase: "pp",
      encryption: { mode: "sse-s3" },
      prefix: "ci",
    })
    const neutral = serverSettings({ secretsObjstoreBucket: "b1", secretsObjstoreEncrypt: "sse-provider" }, drivers, {
      ...env,
      CI_SECRETS_OBJSTORE_ACCESS_KEY_ID: "id",
      CI_SECRETS_OBJSTORE_SECRET_ACCESS_KEY: "sk",
    }).s3Secrets
    expect(neutral).toMatchObject({
      bucket: "b1",
      encryption: { mode: "sse-s3" },
      credentials: { accessKeyId: "id", secretAccessKey: "sk" },
    })
    expect(apiserverSettings({ kubeconfig: "k", secretsS3Bucket: "b2" }, drivers, env).s3Secrets?.bucket).toBe("b2")
  })

  it("take sse-kms with an optional key id, and sse-c with its 32-byte key", () => {
    const s3 = (flags: Record<string, string>) =>
      serverSettings({ secretsS3Bucket: "b", ...flags }, drivers, env).s3Secrets
    expect(s3({ secretsS3Encrypt: "sse-kms" })?.encryption).toEqual({ mode: "sse-kms" })
    expect(s3({ secretsS3Encrypt: "sse-kms", secretsS3KmsKeyId: "alias/ci" })?.encryption).toEqual({
      mode: "sse-kms",
      kmsKeyId: "alias/ci",
    })
    expect(s3({ secretsS3Encrypt: "sse-c", secretsS3SseCKey: key })?.encryption).toEqual({
      mode: "sse-c",
      customerKey: key,
    })
  })

  it("refuse an unknown mode listing the three, sse-c without a key or with a bad one, and half the credentials", () => {
    const s3 = (flags: Record<string, string>) => () => serverSettings({ secretsS3Bucket: "b", ...flags }, drivers, env)
    expect(s3({ secretsS3Encrypt: "aes" })).toThrow(
      '--secrets-s3-encrypt "aes" is not known: use sse-s3, sse-kms, sse-c',
    )
    expect(s3({ secretsS3Encrypt: "sse-c" })).toThrow(
      "--secrets-s3-encrypt sse-c needs its key: --secrets-s3-sse-c-key",
    )
    expect(s3({ secretsS3Encrypt: "sse-c", secretsS3SseCKey: "c2hvcnQ=" })).toThrow(
      "--secrets-s3-sse-c-key must be 32 bytes in base64",
    )
    expect(s3({ secretsS3SseCKey: key })).toThrow("need --secrets-s3-encrypt sse-kms or sse-c")
    expect(s3({ secretsS3AccessKeyId: "id" })).toThrow(
      "give --secrets-s3-access-key-id and --secrets-s3-secret-access-key together",
    )
    expect(s3({ secretsS3Endpoint: "not a url" })).toThrow('--secrets-s3-endpoint "not a url" is not a URL')
  })
})
