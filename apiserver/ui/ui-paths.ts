/**
 * The paths the web UI answers: its pages and its assets. The HTTP front (cli/http-server.ts) sends them
 * to the API's app; a module of its own, so that the front loads nothing more before it listens.
 */
export const isUiPath = (path: string) =>
  path === "/" || path === "/search" || /^\/(pipelines|runs|assets)\/[^/]+$/.test(path)
