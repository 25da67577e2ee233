// Call MCP tools through OpenClaw's own bundle-MCP runtime, with no LLM: the code path its
// embedded agent uses to turn `mcp.servers` and enabled plugins' `mcpServers` into agent tools.
// Internal OpenClaw API (dist/agents/*), verified on openclaw 2026.9.6; see ../shared/notes/mcp-hosts.md §3.5.
// Usage: node openclaw_runtime_call.mjs OPENCLAW_DIST '[{"tool": "srv__name", "args": {...}}, ...]'
// Prints one line "RESULT_JSON:{tools, calls:[{tool, result|error}]}" on stdout.
const [dist, callsJson] = process.argv.slice(2);
const { loadConfig } = await import(`${dist}/plugin-sdk/config-runtime.js`);
const { createBundleMcpToolRuntime } = await import(`${dist}/agents/agent-bundle-mcp-materialize.js`);

const cfg = loadConfig();
const workspaceDir = process.env.OC_WORKSPACE ?? `${process.env.HOME}/.openclaw/workspace`;
const runtime = await createBundleMcpToolRuntime({ workspaceDir, cfg });
const out = { tools: runtime.tools.map((t) => t.name), calls: [] };
for (const { tool, args } of JSON.parse(callsJson ?? "[]")) {
  const found = runtime.tools.find((t) => t.name === tool);
  if (!found) {
    out.calls.push({ tool, error: "not materialized" });
    continue;
  }
  try {
    out.calls.push({ tool, result: await found.execute(`call-${tool}`, args, undefined) });
  } catch (err) {
    out.calls.push({ tool, error: String(err?.stack ?? err) });
  }
}
await runtime.dispose();
process.stdout.write(`RESULT_JSON:${JSON.stringify(out)}\n`);
