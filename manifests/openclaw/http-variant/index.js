// The HTTP variant: OpenClaw connects to an already running `reflectworld serve --http`.
// The tools come from that MCP server; this entry module registers nothing.
export default {
  id: "reflectworld-http",
  name: "ReflectWorld (HTTP)",
  description: "Camera and video memory over MCP, from a running reflectworld serve --http",
  register(_api) {},
};
