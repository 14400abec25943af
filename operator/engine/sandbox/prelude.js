// Evaluated inside each run's isolate before the user's script. It builds the
// globals a pipeline sees from the host references the sandbox leaves on
// globalThis, then removes those references so that the only way out of the
// isolate is through the functions defined here.
;((global) => {
  const host = global.__runnelHost
  delete global.__runnelHost
  const {
    runTask,
    log,
    respond,
    webhookTrigger: evaluateTrigger,
    gate: openGate,
    fetch: sendFetch,
    decodeUtf8,
    notifyConfigs,
    notifySend,
    resource,
  } = host
  const pipelineContext = deepFreeze(JSON.parse(host.context))
  const request = host.request === undefined ? undefined : webhookRequest(JSON.parse(host.request))

  function deepFreeze(value) {
    if (value !== null && typeof value === "object") {
      for (const item of Object.values(value)) deepFreeze(item)
      Object.freeze(value)
    }
    return value
  }

  // HTTP header names are case-insensitive: the host gives them in lower case,
  // and any spelling finds them (headers["X-GitHub-Event"]). The target is
  // frozen; the proxy only reads, so the object invariants hold.
  function webhookRequest(raw) {
    const headers = deepFreeze(raw.headers)
    const named = (key) => (typeof key === "string" && !Object.hasOwn(headers, key) ? key.toLowerCase() : key)
    const caseless = new Proxy(headers, {
      get: (target, key, receiver) =>
        Reflect.get(target, Object.hasOwn(target, named(key)) ? named(key) : key, receiver),
      has: (target, key) => Reflect.has(target, named(key)) || Reflect.has(target, key),
    })
    return Object.freeze({ ...deepFreeze(raw), headers: caseless })
  }

  // Errors from the host carry the host's stack; give them the caller's line instead.
  function withCallerStack(trace) {
    return (error) => {
      const rethrown = new Error(error?.message ?? String(error))
      rethrown.stack = `Error: ${rethrown.message}\n${String(trace.stack).split("\n").slice(1).join("\n")}`
      throw rethrown
    }
  }

  // An asynchronous host call: `request()` builds the argument (its errors reject, with the caller's line),
  // the host answers an envelope {ok, result} or {ok: false, message}, and the result reaches the script frozen.
  function callHost(reference, request) {
    const trace = new Error()
    let json
    try {
      json = JSON.stringify(request())
    } catch (error) {
      return Promise.reject(error)
    }
    return reference.apply(undefined, [json], { result: { promise: true, copy: true } }).then((text) => {
      const settled = JSON.parse(text)
      if (!settled.ok) withCallerStack(trace)(settled)
      return deepFreeze(settled.result)
    }, withCallerStack(trace))
  }

  const volumeHandles = new WeakSet()
  const volumeNames = new Set()
  const volumes = Object.freeze({
    create(options) {
      const name = options?.name ?? `volume-${volumeNames.size + 1}`
      if (typeof name !== "string" || !/^[a-z0-9][a-z0-9_.-]{0,62}$/.test(name)) {
        throw new TypeError(
          `volumes.create: name ${JSON.stringify(name)} is not valid; use lowercase letters, digits, ".", "_" and "-", starting with a letter or digit`,
        )
      }
      if (volumeNames.has(name)) throw new Error(`volumes.create: a volume named "${name}" already exists in this run`)
      volumeNames.add(name)
      const volume = Object.freeze({ name })
      volumeHandles.add(volume)
      return volume
    },
  })

  function mountNames(mounts) {
    if (mounts === undefined) return undefined
    if (mounts === null || typeof mounts !== "object") throw new TypeError("runtime.run: mounts must be an object")
    const names = {}
    for (const [path, volume] of Object.entries(mounts)) {
      if (!volumeHandles.has(volume)) {
        throw new TypeError(`runtime.run: mounts[${JSON.stringify(path)}] must be a volume from volumes.create()`)
      }
      names[path] = volume.name
    }
    return names
  }

  const runtime = Object.freeze({
    run(task) {
      return callHost(runTask, () => ({ ...task, mounts: mountNames(task?.mounts) }))
    },
  })

  function format(value) {
    if (typeof value === "string") return value
    if (value instanceof Error) return `${value.name}: ${value.message}`
    if (typeof value === "function") return `[function ${value.name || "anonymous"}]`
    if (typeof value === "bigint" || typeof value === "symbol" || value === undefined) return String(value)
    try {
      return JSON.stringify(value)
    } catch {
      return String(value)
    }
  }
  function writer(stream) {
    // Synchronous, so console output keeps its order with everything else the script does.
    return (...values) => log.applySync(undefined, [stream, `${values.map(format).join(" ")}\n`])
  }
  const console = Object.freeze({
    log: writer("stdout"),
    info: writer("stdout"),
    debug: writer("stdout"),
    warn: writer("stderr"),
    error: writer("stderr"),
  })

  function fail(what, detail, message) {
    throw new Error(`assert.${what} failed: ${detail}${message === undefined ? "" : `: ${message}`}`)
  }
  const show = (value) => (typeof value === "string" ? JSON.stringify(value) : format(value))
  const assert = Object.freeze({
    equal(actual, expected, message) {
      if (actual !== expected) fail("equal", `expected ${show(expected)}, got ${show(actual)}`, message)
    },
    notEqual(actual, expected, message) {
      if (actual === expected) fail("notEqual", `expected a value other than ${show(expected)}`, message)
    },
    containsString(text, part, message) {
      if (typeof text !== "string" || !text.includes(part)) {
        fail("containsString", `expected ${show(text)} to contain ${show(part)}`, message)
      }
    },
    truthy(value, message) {
      if (!value) fail("truthy", `expected a truthy value, got ${show(value)}`, message)
    },
  })

  // The API server sends the response from the Run's status, which Kubernetes
  // keeps in an object of at most 1.5 MiB: the body gets a third of that.
  const maxResponseBodyBytes = 512 * 1024
  const headerName = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/

  function utf8Bytes(text) {
    let bytes = 0
    for (let at = 0; at < text.length; at++) {
      const code = text.charCodeAt(at)
      if (code < 0x80) bytes += 1
      else if (code < 0x800) bytes += 2
      else if (code >= 0xd800 && code <= 0xdbff && at + 1 < text.length) {
        bytes += 4
        at++
      } else bytes += 3
    }
    return bytes
  }

  // Checks and normalises the argument of http.respond() where the script can
  // catch the error, with the script's line in its stack.
  function webhookResponse(response) {
    const where = "http.respond"
    if (response === undefined) response = {}
    if (response === null || typeof response !== "object" || Array.isArray(response)) {
      throw new TypeError(`${where}: expected an object such as { status: 200, body: "ok" }, got ${show(response)}`)
    }
    const { status = 200, body, headers = {} } = response
    if (!Number.isInteger(status) || status < 100 || status > 599) {
      throw new RangeError(`${where}: status must be a whole number from 100 to 599, got ${show(status)}`)
    }
    if (headers === null || typeof headers !== "object" || Array.isArray(headers)) {
      throw new TypeError(`${where}: headers must be an object of header names to string values, got ${show(headers)}`)
    }
    const sent = {}
    const seen = new Set()
    for (const [name, value] of Object.entries(headers)) {
      if (!headerName.test(name)) {
        throw new TypeError(
          `${where}: ${JSON.stringify(name)} is not a valid header name; use letters, digits and "-", such as "content-type"`,
        )
      }
      if (seen.has(name.toLowerCase()))
        throw new TypeError(`${where}: header "${name}" is given twice (names ignore case)`)
      seen.add(name.toLowerCase())
      if (typeof value !== "string") {
        throw new TypeError(`${where}: header "${name}" must be a string, got ${show(value)}; convert it with String()`)
      }
      if (/[\r\n\0]/.test(value))
        throw new TypeError(`${where}: header "${name}" contains a line break or NUL, which HTTP does not allow`)
      sent[name] = value
    }
    let text
    if (body === undefined) text = ""
    else if (typeof body === "string") text = body
    else if (body !== null && typeof body === "object") {
      try {
        text = JSON.stringify(body)
      } catch (error) {
        throw new TypeError(`${where}: the body could not be encoded as JSON: ${error?.message ?? String(error)}`)
      }
      if (!seen.has("content-type")) sent["content-type"] = "application/json"
    } else {
      throw new TypeError(`${where}: body must be a string, or an object or array to send as JSON, got ${show(body)}`)
    }
    if (text.length > maxResponseBodyBytes / 3 && utf8Bytes(text) > maxResponseBodyBytes) {
      throw new RangeError(
        `${where}: the body is ${utf8Bytes(text)} bytes; the limit is ${maxResponseBodyBytes} (512 KiB)`,
      )
    }
    return { status, headers: sent, body: text }
  }

  let responded = false
  const http = Object.freeze({
    request: () => request,
    // Outside webhook runs it does nothing, so one script serves both kinds of run.
    respond(response) {
      if (request === undefined || responded) return false
      const checked = webhookResponse(response)
      responded = true
      return respond.applySync(undefined, [JSON.stringify(checked)])
    },
  })

  function webhookTrigger(expression) {
    if (typeof expression !== "string") {
      throw new TypeError(
        `webhookTrigger: the expression must be a string such as 'eventType == "push"', got ${show(expression)}`,
      )
    }
    return evaluateTrigger.applySync(undefined, [expression])
  }

  const durationUnitsMs = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }

  // A `timeout` option in milliseconds: a duration such as "30s" or "1m30s", or a number of seconds; undefined when absent.
  function timeoutOption(where, timeout) {
    let timeoutMs
    if (typeof timeout === "number") {
      if (!Number.isFinite(timeout) || timeout <= 0) {
        throw new RangeError(
          `${where}: timeout must be a positive number of seconds or a duration such as "30m", got ${show(timeout)}`,
        )
      }
      timeoutMs = Math.round(timeout * 1000)
    } else if (typeof timeout === "string") {
      const parts = /^(?:\d+(?:\.\d+)?(?:ms|s|m|h))+$/.test(timeout)
        ? timeout.match(/\d+(?:\.\d+)?(?:ms|s|m|h)/g)
        : null
      if (parts === null) {
        throw new RangeError(
          `${where}: timeout must be a duration such as "30s", "1h" or "1m30s", or a number of seconds, got ${show(timeout)}`,
        )
      }
      timeoutMs = 0
      for (const part of parts) {
        const [, amount, unit] = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/.exec(part)
        timeoutMs += Number(amount) * durationUnitsMs[unit]
      }
      timeoutMs = Math.round(timeoutMs)
      if (timeoutMs <= 0) throw new RangeError(`${where}: timeout must be longer than 0, got ${show(timeout)}`)
    } else if (timeout !== undefined) {
      throw new TypeError(
        `${where}: timeout must be a duration such as "30s" or a number of seconds, got ${show(timeout)}`,
      )
    }
    return timeoutMs
  }

  // Checks `pipeline.gate()`'s argument where the script can catch the error, naming the field.
  function gateRequest(options) {
    const where = "pipeline.gate"
    if (options === null || typeof options !== "object" || Array.isArray(options)) {
      throw new TypeError(
        `${where}: expected an object such as { name: "deploy", timeout: "1h" }, got ${show(options)}`,
      )
    }
    const { name, message, timeout, approvers } = options
    if (typeof name !== "string" || name.trim() === "" || name.length > 253) {
      throw new TypeError(`${where}: name must be a non-empty string of at most 253 characters, got ${show(name)}`)
    }
    if (message !== undefined && typeof message !== "string") {
      throw new TypeError(`${where}: message must be a string, got ${show(message)}`)
    }
    if (approvers !== undefined && (typeof approvers !== "string" || approvers.trim() === "")) {
      throw new TypeError(
        `${where}: approvers must be a CEL expression string such as 'user.username == "alice"', got ${show(approvers)}`,
      )
    }
    const timeoutMs = timeoutOption(where, timeout)
    return {
      name,
      ...(message === undefined ? {} : { message }),
      ...(timeoutMs === undefined ? {} : { timeoutMs }),
      ...(approvers === undefined ? {} : { approvers }),
    }
  }

  function gate(options) {
    return callHost(openGate, () => gateRequest(options))
  }
  const pipelineApi = Object.freeze({ gate })

  // Header names and values as the WHATWG fetch standard checks them; names are kept in lower case.
  function headerPair(where, name, value) {
    const key = String(name)
    if (!headerName.test(key)) throw new TypeError(`${where}: ${JSON.stringify(key)} is not a valid header name`)
    const text = String(value).replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, "")
    if (/[\r\n\0]/.test(text)) throw new TypeError(`${where}: header "${key}" contains a line break or NUL`)
    return [key.toLowerCase(), text]
  }

  class Headers {
    #list = []
    constructor(init) {
      if (init === undefined || init === null) return
      const pairs =
        init instanceof Headers
          ? [...init.#list]
          : Array.isArray(init) || typeof init[Symbol.iterator] === "function"
            ? Array.from(init, (pair) => {
                const items = Array.from(pair)
                if (items.length !== 2) throw new TypeError("Headers: each header must be a [name, value] pair")
                return items
              })
            : typeof init === "object"
              ? Object.entries(init)
              : null
      if (pairs === null)
        throw new TypeError(`Headers: expected an object, a list of pairs or Headers, got ${show(init)}`)
      for (const [name, value] of pairs) this.append(name, value)
    }
    append(name, value) {
      this.#list.push(headerPair("Headers.append", name, value))
    }
    set(name, value) {
      const pair = headerPair("Headers.set", name, value)
      this.#list = this.#list.filter(([key]) => key !== pair[0])
      this.#list.push(pair)
    }
    delete(name) {
      const key = String(name).toLowerCase()
      this.#list = this.#list.filter(([item]) => item !== key)
    }
    get(name) {
      const key = String(name).toLowerCase()
      const values = this.#list.filter(([item]) => item === key).map(([, value]) => value)
      return values.length === 0 ? null : values.join(", ")
    }
    getSetCookie() {
      return this.#list.filter(([key]) => key === "set-cookie").map(([, value]) => value)
    }
    has(name) {
      const key = String(name).toLowerCase()
      return this.#list.some(([item]) => item === key)
    }
    // Sorted by name, values of one name joined, except set-cookie (the standard's "sort and combine").
    *entries() {
      const names = [...new Set(this.#list.map(([key]) => key))].sort()
      for (const key of names) {
        if (key === "set-cookie") for (const value of this.getSetCookie()) yield [key, value]
        else yield [key, this.get(key)]
      }
    }
    *keys() {
      for (const [key] of this.entries()) yield key
    }
    *values() {
      for (const [, value] of this.entries()) yield value
    }
    forEach(callback, thisArg) {
      for (const [key, value] of this.entries()) callback.call(thisArg, value, key, this)
    }
    [Symbol.iterator]() {
      return this.entries()
    }
    get [Symbol.toStringTag]() {
      return "Headers"
    }
  }

  class Response {
    #body
    #used = false
    constructor(meta, body) {
      this.status = meta.status
      this.statusText = meta.statusText
      this.ok = meta.status >= 200 && meta.status < 300
      this.url = meta.url
      this.redirected = meta.url !== meta.requestedUrl
      this.headers = new Headers(meta.headers)
      this.#body = body
      Object.freeze(this)
    }
    get bodyUsed() {
      return this.#used
    }
    #take() {
      if (this.#used) return Promise.reject(new TypeError("Response: the body has already been read"))
      this.#used = true
      return Promise.resolve(this.#body)
    }
    arrayBuffer() {
      return this.#take()
    }
    text() {
      return this.#take().then((body) => decodeUtf8.applySync(undefined, [body], { arguments: { copy: true } }))
    }
    json() {
      return this.text().then((text) => JSON.parse(text))
    }
  }

  const standardMethods = ["DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"]

  // Checks fetch()'s arguments where the script can catch the error; the host does the request.
  function fetchRequest(input, init) {
    const where = "fetch"
    if (init !== undefined && (init === null || typeof init !== "object")) {
      throw new TypeError(`${where}: the second argument must be an options object, got ${show(init)}`)
    }
    const options = init ?? {}
    const url =
      typeof input === "string"
        ? input
        : input !== null && typeof input === "object"
          ? String(input.url ?? input.href ?? input)
          : null
    if (url === null) throw new TypeError(`${where}: the first argument must be a URL string, got ${show(input)}`)
    const asked = options.method === undefined ? "GET" : String(options.method)
    if (!headerName.test(asked)) throw new TypeError(`${where}: ${JSON.stringify(asked)} is not a valid HTTP method`)
    const method = standardMethods.includes(asked.toUpperCase()) ? asked.toUpperCase() : asked
    const headers = [...new Headers(options.headers).entries()]
    const { body } = options
    let bodyText
    let bodyBytes
    if (body !== undefined && body !== null) {
      if (method === "GET" || method === "HEAD") throw new TypeError(`${where}: a ${method} request cannot have a body`)
      if (typeof body === "string") bodyText = body
      else if (body instanceof ArrayBuffer) bodyBytes = body
      else if (ArrayBuffer.isView(body))
        bodyBytes = body.buffer.slice(body.byteOffset, body.byteOffset + body.byteLength)
      else {
        throw new TypeError(
          `${where}: body must be a string, an ArrayBuffer or a typed array; send an object as JSON.stringify(value), got ${show(body)}`,
        )
      }
      if (bodyText !== undefined && !headers.some(([key]) => key === "content-type")) {
        headers.push(["content-type", "text/plain;charset=UTF-8"])
      }
    }
    const timeoutMs = timeoutOption(where, options.timeout)
    return {
      json: JSON.stringify({
        url,
        method,
        headers,
        ...(bodyText === undefined ? {} : { bodyText }),
        ...(timeoutMs === undefined ? {} : { timeoutMs }),
      }),
      bytes: bodyBytes,
      url,
    }
  }

  function fetch(input, init) {
    const trace = new Error()
    let request
    try {
      request = fetchRequest(input, init)
    } catch (error) {
      return Promise.reject(error)
    }
    return sendFetch
      .apply(undefined, [request.json, request.bytes], {
        arguments: { copy: true },
        result: { promise: true, copy: true },
      })
      .then((settled) => {
        if (!settled.ok) withCallerStack(trace)(settled)
        return new Response({ ...JSON.parse(settled.meta), requestedUrl: request.url }, settled.body)
      }, withCallerStack(trace))
  }

  const notify = Object.freeze({
    setConfigs(configs) {
      const settled = JSON.parse(notifyConfigs.applySync(undefined, [JSON.stringify(configs ?? null)]))
      if (!settled.ok) throw new TypeError(settled.message)
    },
    send(notification) {
      return callHost(notifySend, () => notification ?? null)
    },
  })

  // A volume handle, or { volume, path } with a relative path inside it, as the host names them.
  function volumePlace(where, value) {
    if (volumeHandles.has(value)) return { volume: value.name, path: "" }
    if (value !== null && typeof value === "object" && volumeHandles.has(value.volume)) {
      const path = value.path ?? ""
      if (typeof path !== "string" || path.startsWith("/") || path.split("/").includes("..")) {
        throw new TypeError(`${where}: path must be a relative path inside the volume, got ${show(path)}`)
      }
      return { volume: value.volume.name, path: path.replace(/^\.\/|\/+$/g, "") }
    }
    throw new TypeError(`${where} must be a volume from volumes.create() or { volume, path }, got ${show(value)}`)
  }

  function resourceRequest(operation, options) {
    const where = `nativeResources.${operation}`
    if (options === null || typeof options !== "object" || Array.isArray(options)) {
      throw new TypeError(
        `${where}: expected an object such as { type: "git", source: { uri: "https://..." } }, got ${show(options)}`,
      )
    }
    const { type, source, version, destDir, inputs, image } = options
    const { repository, ...params } = options.params ?? {}
    return {
      operation,
      type,
      source,
      params: operation === "push" ? params : options.params,
      version,
      image,
      ...(operation === "fetch" && destDir !== undefined ? { destDir: volumePlace(`${where}: destDir`, destDir) } : {}),
      ...(operation === "push" && repository !== undefined
        ? { repository: volumePlace(`${where}: params.repository`, repository) }
        : {}),
      ...(operation === "push" && inputs !== undefined
        ? {
            inputs: Object.fromEntries(
              Object.entries(inputs).map(([name, value]) => [name, volumePlace(`${where}: inputs.${name}`, value)]),
            ),
          }
        : {}),
    }
  }

  const nativeResources = Object.freeze({
    check: (options) => callHost(resource, () => resourceRequest("check", options)),
    fetch: (options) => callHost(resource, () => resourceRequest("fetch", options)),
    push: (options) => callHost(resource, () => resourceRequest("push", options)),
  })

  function require(name) {
    throw new Error(
      `cannot import "${name}": pipelines run in a sandbox without Node modules; run tools in a task with runtime.run()`,
    )
  }

  const module = { exports: {} }
  Object.defineProperties(global, {
    runtime: { value: runtime },
    volumes: { value: volumes },
    console: { value: console },
    assert: { value: assert },
    http: { value: http },
    webhookTrigger: { value: webhookTrigger },
    fetch: { value: fetch },
    Headers: { value: Headers },
    notify: { value: notify },
    nativeResources: { value: nativeResources },
    pipelineContext: { value: pipelineContext },
    // A script's own `pipeline` (its export) shadows this global; __runnelMain gives that function `gate` too.
    pipeline: { value: pipelineApi, configurable: true },
    require: { value: require },
    module: { value: module },
    exports: { get: () => module.exports },
  })

  function describe(error) {
    const isError = error instanceof Error
    return JSON.stringify({
      ok: false,
      message: isError ? error.message : `a non-Error value was thrown: ${format(error)}`,
      stack: isError ? String(error.stack) : "",
    })
  }

  // The host wraps the compiled script in a function and calls this with it;
  // it settles with a JSON outcome and never throws.
  global.__runnelMain = async (body) => {
    try {
      body()
    } catch (error) {
      return describe(error)
    }
    const exported = module.exports
    const pipeline = typeof exported.pipeline === "function" ? exported.pipeline : exported.default
    if (typeof pipeline !== "function") return JSON.stringify({ missingExport: true })
    if (!Object.hasOwn(pipeline, "gate") && Object.isExtensible(pipeline)) {
      Object.defineProperty(pipeline, "gate", { value: gate })
    }
    try {
      await pipeline()
      return JSON.stringify({ ok: true })
    } catch (error) {
      return describe(error)
    }
  }
})(globalThis)
