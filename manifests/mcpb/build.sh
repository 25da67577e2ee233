#!/usr/bin/env bash
# Build the Claude Desktop extension from this checkout: the package's wheel goes inside the bundle
# (server/), and the extension runs it with `uvx --from ${__dirname}/server/<wheel>`, so no package
# index release is needed (uv fetches only the dependencies).
# Usage: manifests/mcpb/build.sh [OUT.mcpb]      (default: dist/reflectworld.mcpb)
# Needs uv (or python3 with pip) and Node 22.19+; UV=/path/to/uv and MCPB=/path/to/mcpb override
# `uv` and `npx -y @anthropic-ai/mcpb@2.1.2`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${1:-$ROOT/dist/reflectworld.mcpb}"
PYTHON="${PYTHON:-python3}"
STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT

mkdir -p "$STAGE/server" "$(dirname "$OUT")"
if command -v "${UV:-uv}" >/dev/null 2>&1; then
  "${UV:-uv}" build --quiet --wheel --out-dir "$STAGE/server" "$ROOT"
else
  "$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$STAGE/server" "$ROOT"
fi
WHEEL="$(cd "$STAGE/server" && ls reflectworld_mm-*.whl)"
grep -q "\${__dirname}/server/$WHEEL\"" "$ROOT/manifests/mcpb/manifest.json" || {
  echo "build.sh: manifests/mcpb/manifest.json does not launch server/$WHEEL; update its --from argument" >&2
  exit 1
}
cp "$ROOT/manifests/mcpb/manifest.json" "$STAGE/manifest.json"
if [ -n "${MCPB:-}" ]; then
  "$MCPB" pack "$STAGE" "$OUT"
else
  npx -y @anthropic-ai/mcpb@2.1.2 pack "$STAGE" "$OUT"
fi
echo "built $OUT (open it in Claude Desktop; it needs uv on the machine)"
