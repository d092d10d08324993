// The bridge's cost-model helpers (docs/accounting.md): prefix matching, pi's compaction
// settings as pi resolves them, the status line. Run: node --test tests/node/*.test.ts
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { compactionSettings, prefixChars, statusText, summaryChars } from "../../ctxwrap/_bridge/ctxwrap-bridge.ts";

test("prefixChars counts leading blocks equal in identity and size", () => {
  const a: [string, number][] = [["tools", 100], ["sys", 50], ["u1", 10]];
  assert.equal(prefixChars(a, [...a, ["a1", 5]]), 160);
  assert.equal(prefixChars(a, [["tools", 100], ["sys", 50], ["u1", 11]]), 150); // same id, new size
  assert.equal(prefixChars(a, [["tools", 100], ["sys2", 50], ["u1", 10]]), 100);
  assert.equal(prefixChars([], a), 0);
});

test("summaryChars cuts tool results as pi's summariser does", () => {
  assert.equal(summaryChars("toolResult", 5000), 2000);
  assert.equal(summaryChars("toolResult", 10), 10);
  assert.equal(summaryChars("assistant", 5000), 5000);
});

function dirs(global: object | null, project: object | null): { agent: string; cwd: string } {
  const root = mkdtempSync(join(tmpdir(), "cw-cost-"));
  const agent = join(root, "agent");
  const cwd = join(root, "work");
  mkdirSync(agent, { recursive: true });
  mkdirSync(join(cwd, ".pi"), { recursive: true });
  if (global) writeFileSync(join(agent, "settings.json"), JSON.stringify(global));
  if (project) writeFileSync(join(cwd, ".pi", "settings.json"), JSON.stringify(project));
  process.env.PI_CODING_AGENT_DIR = agent;
  return { agent, cwd };
}

test("compaction settings: pi's defaults, global file, project file, per-model overrides", () => {
  const model = { provider: "p", id: "m" };
  let d = dirs(null, null);
  assert.deepEqual(compactionSettings(d.cwd, model, false), { enabled: true, reserve_tokens: 16384, keep_recent_tokens: 20000 });
  d = dirs({ compaction: { reserveTokens: 1000, keepRecentTokens: 500 } }, { compaction: { keepRecentTokens: 700 } });
  // pi 0.73: the project file always counts
  assert.deepEqual(compactionSettings(d.cwd, model, false), { enabled: true, reserve_tokens: 1000, keep_recent_tokens: 700 });
  // pi 1.x: only in a trusted project (visible here only as defaultProjectTrust "always")
  assert.equal(compactionSettings(d.cwd, model, true).keep_recent_tokens, 500);
  d = dirs(
    { defaultProjectTrust: "always", compaction: { reserveTokens: 1000, modelOverrides: { "p/m": { reserveTokens: 9000 } } } },
    { compaction: { reserveTokens: 2000, enabled: false } },
  );
  // a global model-specific value beats a project-wide fallback (pi 1.x docs)
  assert.deepEqual(compactionSettings(d.cwd, model, true), { enabled: false, reserve_tokens: 9000, keep_recent_tokens: 20000 });
  assert.equal(compactionSettings(d.cwd, { provider: "p", id: "other" }, true).reserve_tokens, 2000);
  // garbage is ignored, never thrown
  d = dirs({ compaction: { reserveTokens: -5, keepRecentTokens: "lots" } }, null);
  writeFileSync(join(d.cwd, ".pi", "settings.json"), "{not json");
  assert.deepEqual(compactionSettings(d.cwd, model, false), { enabled: true, reserve_tokens: 16384, keep_recent_tokens: 20000 });
});

test("status line shows the cache-priced saving and compactions when known", () => {
  assert.equal(statusText({ saved_tokens: 1200, net_tokens: 1000 }), "ctxwrap: saved 1,200 tok · net 1,000");
  assert.equal(
    statusText({ saved_tokens: 1200, net_tokens: 1000, cost_saved_pct: 41.6, saved_usd: 0.123, compactions: 1, plain_compactions: 3 }),
    "ctxwrap: saved 1,200 tok · net 1,000 · cost −42% ($0.12) · compactions 1/3 plain",
  );
  assert.equal(statusText({ saved_tokens: 0, net_tokens: -50, cost_saved_pct: -3.2, saved_usd: null }), "ctxwrap: saved 0 tok · net -50 · cost +3%");
});
