// ReflectWorld ships no OpenClaw-side code: its tools come from the MCP server that
// openclaw.plugin.json declares under `mcpServers` (started by OpenClaw while the plugin is enabled).
// OpenClaw still requires an entry module, so this one registers nothing.
export default {
  id: "reflectworld",
  name: "ReflectWorld",
  description: "Camera and video memory over MCP (memory_search, memory_get, memory_visual_evidence, entity_list, entity_get)",
  register(_api) {},
};
