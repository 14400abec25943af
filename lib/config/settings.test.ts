import { describe, expect, it } from "vitest"
import { apiserverFlags, apiserverSettings } from "./apiserver.ts"
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

  it("resolve the operator's Kubernetes API by the one policy: here $KUBECONFIG", () => {
    expect(operatorSettings({}, drivers, env).kube).toEqual({
      kind: "files",
      files: ["/etc/kube.yaml"],
      from: '$KUBECONFIG "/etc/kube.yaml"',
    })
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

  it("give a client its URL without credentials and its Authorization header", () => {
    expect(clientSettings({ serverUrl: "http://me:pw@host:8080/" }, {})).toEqual({
      url: "http://host:8080",
      authorization: `Basic ${Buffer.from("me:pw").toString("base64")}`,
    })
    expect(clientSettings({ authToken: "t" }, { CI_SERVER_URL: "https://ci.example" })).toEqual({
      url: "https://ci.example",
      authorization: "Bearer t",
    })
    expect(() => clientSettings({ serverUrl: "ftp://x" }, {})).toThrow('--server-url "ftp://x" must start with http://')
  })
})
