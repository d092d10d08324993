// The bridge's statistics meter: what each mechanism kept out of the messages sent, by the same
// measure as what was sent. A history mask counts as masking, a tagger's tombstone as amnesia.
// Run: node --test tests/node/

import assert from "node:assert/strict";
import { test } from "node:test";

import { ContextMeter } from "../../ctxwrap/_bridge/ctxwrap-bridge.ts";
import type { Edit } from "../../ctxwrap/_bridge/edits.ts";

const result = (id: string, text: string) => ({
  role: "toolResult",
  toolCallId: id,
  toolName: "read",
  content: [{ type: "text", text }],
  isError: false,
});

test("a history mask counts as masking, a tombstone as amnesia, apart", () => {
  const messages = [
    { role: "user", content: "go" },
    result("r1", "a".repeat(4000)),
    result("r2", "b".repeat(3000)),
  ];
  const edits = new Map<string, Edit[]>([
    ["r1", [{ kind: "mask", toolCallId: "r1", text: "[masked]", savedChars: 0, reason: "untouched" }]],
    ["r2", [{ kind: "tombstone", toolCallId: "r2", text: "[dropped]", savedChars: 0 }]],
  ]);
  const plain = new ContextMeter().measure(messages, new Map(), new Map());
  const m = new ContextMeter().measure(messages, edits, new Map());
  assert.ok(m.masking > 3900 && m.masking < 4000, String(m.masking));
  assert.ok(m.amnesia > 2900 && m.amnesia < 3000, String(m.amnesia));
  // what was sent plus what each kept out is what plain pi would have sent
  assert.equal(m.messages + m.masking + m.amnesia, plain.messages);
});
