// masking.ts against the Python golden cases (tests/fixtures/masking/*.json) and its own rules:
// when a request counts as cold, and which masks the bridge accepts from the daemon.
// Run: node --test tests/node/

import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { applyEdits, asEdit } from "../../ctxwrap/_bridge/edits.ts";
import { acceptableMasks, callPaths, coldReason, lastRequestAt, payloadTtlS } from "../../ctxwrap/_bridge/masking.ts";

const DIR = join(dirname(fileURLToPath(import.meta.url)), "..", "fixtures", "masking");
const CASES = readdirSync(DIR).filter((f) => f.endsWith(".json")).sort();
const load = (f: string): any => JSON.parse(readFileSync(join(DIR, f), "utf8"));

test("there are masking golden cases", () => assert.ok(CASES.length >= 3));

for (const file of CASES) {
  test(`callPaths matches Python: ${file}`, () => {
    const c = load(file);
    assert.deepStrictEqual(callPaths(c.messages), c.paths);
  });
  test(`masks apply like Python, byte for byte: ${file}`, () => {
    const c = load(file);
    const sent = applyEdits(c.messages, [...c.frozen, ...c.edits]);
    assert.equal(JSON.stringify(sent), JSON.stringify(c.expected));
  });
}

test("asEdit keeps a mask's reason; a mask without text is dropped", () => {
  assert.deepStrictEqual(asEdit({ kind: "mask", toolCallId: "c", text: "[m]", savedChars: 3, reason: "superseded" }), {
    kind: "mask", toolCallId: "c", text: "[m]", savedChars: 3, reason: "superseded",
  });
  assert.deepStrictEqual(asEdit({ kind: "mask", toolCallId: "c", text: "[m]", reason: 5 }), {
    kind: "mask", toolCallId: "c", text: "[m]", savedChars: 0, reason: "",
  });
  assert.equal(asEdit({ kind: "mask", toolCallId: "c" }), null);
});

const state = { lastAt: 1000, model: "p/m", tools: '["read"]' };
const now = (at: number, model = "p/m", tools = '["read"]') => ({ at, model, tools });

test("coldReason: idle past the TTL, compaction, model and tool changes; warm otherwise", () => {
  assert.equal(coldReason(state, now(2000), 1000, false, 2000), null);
  assert.equal(coldReason(state, now(3001), 1000, false, 2000), "idle");
  assert.equal(coldReason(state, now(1500), 1000, true, 2000), "compaction");
  assert.equal(coldReason(state, now(1500, "p/other"), 1000, false, 2000), "model");
  assert.equal(coldReason(state, now(1500, "p/m", '["read","x"]'), 1000, false, 2000), "tools");
  // first request of a process: nothing to compare but the gap
  const fresh = { lastAt: null, model: null, tools: null };
  assert.equal(coldReason(fresh, now(1500), null, false, 2000), null);
  assert.equal(coldReason(fresh, now(9000), 1000, false, 2000), "idle");
});

test("lastRequestAt: the newest assistant stamp, not the new prompt's", () => {
  const msgs = [
    { role: "user", timestamp: 10 },
    { role: "assistant", timestamp: 20 },
    { role: "toolResult", timestamp: 30 },
    { role: "assistant", timestamp: 40 },
    { role: "user", timestamp: 99 },
  ];
  assert.equal(lastRequestAt(msgs, msgs.length), 40);
  assert.equal(lastRequestAt(msgs, 3), 20);
  assert.equal(lastRequestAt([{ role: "user", timestamp: 5 }], 1), null);
});

test("acceptableMasks: only seen, paired, unedited, non-error results", () => {
  const msgs = [
    { role: "assistant", content: [{ type: "toolCall", id: "a" }, { type: "toolCall", id: "e" }, { type: "toolCall", id: "t" }] },
    { role: "toolResult", toolCallId: "a", isError: false },
    { role: "toolResult", toolCallId: "e", isError: true },
    { role: "toolResult", toolCallId: "t", isError: false },
    { role: "toolResult", toolCallId: "orphan", isError: false },
    { role: "toolResult", toolCallId: "ed", isError: false },
    { role: "assistant", content: [{ type: "toolCall", id: "new" }] },
    { role: "toolResult", toolCallId: "new", isError: false },
  ];
  const seen = new Set(["a", "e", "t", "orphan", "ed"]);
  const ok = acceptableMasks(
    msgs,
    ["a", "e", "orphan", "ed", "new", "missing"].map((toolCallId) => ({ toolCallId })),
    seen,
    new Set(["ed"]),
  );
  assert.deepStrictEqual([...ok].sort(), ["a"]);
});

test("payloadTtlS: the cache lifetime a provider payload asks for beyond the default", () => {
  // pi under PI_CACHE_RETENTION=long, by provider format
  assert.equal(payloadTtlS({ model: "gpt", prompt_cache_retention: "24h" }), 86_400);
  assert.equal(payloadTtlS({ prompt_cache_options: { ttl: "30m" } }), 1800);
  // a lifetime longer than a day (the protocol's bound) is a day, not a refused record
  assert.equal(payloadTtlS({ prompt_cache_options: { ttl: "48h" } }), 86_400);
  assert.equal(payloadTtlS({ prompt_cache_options: { ttl: "99999999999999999999h" } }), 86_400);
  const anthropic = (cc: unknown) => ({
    system: [{ type: "text", text: "sys", cache_control: cc }],
    messages: [{ role: "user", content: [{ type: "text", text: "hi", cache_control: cc }] }],
  });
  assert.equal(payloadTtlS(anthropic({ type: "ephemeral", ttl: "1h" })), 3600);
  // a marker in a message's nested tool result counts; one in an old message is not walked
  const nested = { messages: [{ role: "user", content: [{ type: "tool_result", content: [{ type: "text", text: "r", cache_control: { type: "ephemeral", ttl: "1h" } }] }] }] };
  assert.equal(payloadTtlS(nested), 3600);
  assert.equal(payloadTtlS({ messages: [...nested.messages, ...Array(4).fill({ role: "user", content: "more" })] }), null);
  // the default lifetime, or none asked for: the configured TTL stands
  assert.equal(payloadTtlS(anthropic({ type: "ephemeral" })), null);
  assert.equal(payloadTtlS({ prompt_cache_retention: "in_memory" }), null);
  assert.equal(payloadTtlS({ prompt_cache_options: { ttl: "5m" } }), null);
  assert.equal(payloadTtlS({ prompt_cache_options: { ttl: "soon" } }), null);
  assert.equal(payloadTtlS(null), null);
  assert.equal(payloadTtlS("payload"), null);
});

test("checksThinkingPrefix and boundByThinking mirror anthropic_wire.py", async () => {
  const { checksThinkingPrefix, boundByThinking } = await import("../../ctxwrap/_bridge/masking.ts");
  for (const m of ["claude-opus-5-5", "claude-sonnet-5-5", "claude-fable-5-1-20261001", "claude-mythos-6", "claude-mythos-preview", "anthropic/claude-opus-5.5", "anthropic.claude-haiku-5-5-v1:0"])
    assert.equal(checksThinkingPrefix(m), true, m);
  for (const m of ["claude-opus-4-8", "claude-opus-5", "claude-fable-5", "claude-opus-4-5-20251101", "anthropic/claude-opus-4.8", "claude-3-7-sonnet-20250219", "gpt-5.5", undefined])
    assert.equal(checksThinkingPrefix(m), false, String(m));
  const msgs = [
    { role: "user", content: "go" },
    { role: "assistant", content: [{ type: "toolCall", id: "a", name: "read", arguments: { path: "x" } }] },
    { role: "toolResult", toolCallId: "a", content: [{ type: "text", text: "x" }] },
    { role: "assistant", content: [{ type: "thinking", thinking: "t", thinkingSignature: "s" }, { type: "toolCall", id: "b", name: "read", arguments: { path: "y" } }] },
    { role: "toolResult", toolCallId: "b", content: [{ type: "text", text: "y" }] },
    { role: "assistant", content: [
      { type: "toolCall", id: "w", name: "write", arguments: { path: "z", content: "big" } },
      { type: "thinking", thinking: "between the calls", thinkingSignature: "s2" },
      { type: "toolCall", id: "c", name: "bash", arguments: { command: "ls" } },
    ] },
  ];
  // a's call and result and b's are in a later block's prefix; so is the write call w, which
  // a thinking block of its own message follows; c comes after the last block
  assert.deepStrictEqual([...boundByThinking(msgs)].sort(), ["a", "b", "w"]);
});
