// The bridge's tag batching (issue 15, cheaper tagging): the read-like results of one assistant
// message go out in one batch when the round's last read-like call ends; other calls never
// hold it back. The end-to-end version (real pi 1.6 and 0.73, one aux request for a parallel
// round) is tests/e2e/test_tag_batch_e2e.py.
// Run: node --test tests/node/

import assert from "node:assert/strict";
import { test } from "node:test";

import { TagRound } from "../../ctxwrap/_bridge/ctxwrap-bridge.ts";

const item = (id: string) => ({ tool_call_id: id, tool_name: "read", input: {}, text: id });
const ids = (b: { items: any[] } | null) => (b ? b.items.map((i) => i.tool_call_id) : null);

test("a parallel round goes out once, when its last read-like call ends", () => {
  const round = new TagRound();
  assert.equal(round.start(["r1", "r2", "r3"]), null);
  const joined = round.add("r1", item("r1"), "ctx1");
  assert.ok(joined);
  assert.equal(round.ended("r1"), null);
  assert.equal(round.ended("r2"), null); // r2: too small to tag, but its call has ended
  assert.equal(round.ended("bash-1"), null); // not a read-like call of the round: no effect
  assert.equal(round.add("r3", item("r3"), "ctx3"), joined); // same batch, same done promise
  const due = round.ended("r3");
  assert.equal(due, joined);
  assert.deepEqual(ids(due), ["r1", "r3"]);
  assert.equal(due!.ctx, "ctx3"); // the latest result's context runs the aux call
  assert.equal(round.ended("r3"), null); // an id ends once
  assert.equal(round.take(), null);
});

test("a round of one taggable result is due at once", () => {
  const round = new TagRound();
  round.start(["only"]);
  round.add("only", item("only"), null);
  assert.deepEqual(ids(round.ended("only")), ["only"]);
});

test("a round without taggable results sends nothing", () => {
  const round = new TagRound();
  round.start(["a", "b"]);
  assert.equal(round.ended("a"), null);
  assert.equal(round.ended("b"), null);
});

test("a call outside the round (nested) is not batched", () => {
  const round = new TagRound();
  round.start(["r1"]);
  assert.equal(round.add("r1/1", item("r1/1"), null), null);
});

test("a call that never reports keeps the batch until the next message or LLM call", () => {
  const round = new TagRound();
  round.start(["r1", "blocked"]);
  round.add("r1", item("r1"), null);
  assert.equal(round.ended("r1"), null);
  // the next assistant message: what the old round held is handed back, to send now
  assert.deepEqual(ids(round.start(["n1"])), ["r1"]);
  round.add("n1", item("n1"), null);
  // an LLM call starts before n1's round reported its end: take it now, the round is over
  assert.deepEqual(ids(round.take()), ["n1"]);
  assert.equal(round.add("n1", item("n1"), null), null);
});

test("the batch's done promise settles when resolved", async () => {
  const round = new TagRound();
  round.start(["r1"]);
  const batch = round.add("r1", item("r1"), null)!;
  let settled = false;
  batch.done.then(() => (settled = true));
  batch.resolve();
  await batch.done;
  assert.ok(settled);
});
