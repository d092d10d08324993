// The bridge's own copy of paths.check_socket (issue 12, finding 2): which daemon sockets it
// refuses to send a byte to. Run: node --test tests/node/*.test.ts
import { test } from "node:test";
import assert from "node:assert/strict";
import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fallbackRuntimeDir, socketRefusal } from "../../ctxwrap/_bridge/ctxwrap-bridge.ts";

function listen(path: string): Promise<Server> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.listen(path, () => resolve(srv));
  });
}

test("socketRefusal: only a socket of ours in a private directory of ours", async () => {
  const base = mkdtempSync(join(tmpdir(), "cwn"));
  try {
    const dir = join(base, "ctxwrap");
    mkdirSync(dir, { mode: 0o700 });
    const sock = join(dir, "daemon.sock");
    assert.equal(socketRefusal(sock), "missing");
    const srv = await listen(sock);
    try {
      assert.equal(socketRefusal(sock), null);
      chmodSync(dir, 0o777);
      assert.match(socketRefusal(sock) ?? "", /has mode 777, open to other users/);
      chmodSync(dir, 0o700);
      if (process.getuid?.() === 0) {
        chownSync(sock, 65534, 65534);
        assert.match(socketRefusal(sock) ?? "", /daemon\.sock is owned by uid 65534/);
        chownSync(dir, 65534, 65534);
        assert.match(socketRefusal(sock) ?? "", /ctxwrap is owned by uid 65534/);
      }
    } finally {
      srv.close();
    }
    const link = join(base, "link");
    symlinkSync(dir, link);
    assert.match(socketRefusal(join(link, "daemon.sock")) ?? "", /is a symlink/);
    const other = join(base, "plain");
    mkdirSync(other, { mode: 0o700 });
    writeFileSync(join(other, "daemon.sock"), "");
    assert.match(socketRefusal(join(other, "daemon.sock")) ?? "", /is not a socket/);
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
});

test("fallbackRuntimeDir: the /tmp directory paths.py names, one per state dir (HOME)", () => {
  // values from ctxwrap/paths.py's fallback_runtime_dir() for the same environment
  const saved = { HOME: process.env.HOME, XDG_STATE_HOME: process.env.XDG_STATE_HOME };
  const uid = process.getuid?.() ?? 0;
  try {
    process.env.HOME = "/home/x";
    delete process.env.XDG_STATE_HOME;
    assert.equal(fallbackRuntimeDir(), `/tmp/ctxwrap-${uid}-cceabc75fc`);
    process.env.XDG_STATE_HOME = "/s";
    assert.equal(fallbackRuntimeDir(), `/tmp/ctxwrap-${uid}-afb6669a3f`);
    process.env.XDG_STATE_HOME = "relative";  // counts as unset
    assert.equal(fallbackRuntimeDir(), `/tmp/ctxwrap-${uid}-cceabc75fc`);
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
});
