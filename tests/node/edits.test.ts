// edits.ts against the golden cases the Python engine produced (tests/fixtures/edits/*.json):
// the two languages must describe the tail and apply edits identically.
// Run: node --test tests/node/   (Node >= 22.18 strips types without a flag)

import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import {
  allToolCallIds,
  applyEdits,
  argsSig,
  canon,
  describeTail,
  fnv1a64,
  tailIds,
} from "../../ctxwrap/_bridge/edits.ts";

const DIR = join(dirname(fileURLToPath(import.meta.url)), "..", "fixtures", "edits");
const CASES = readdirSync(DIR).filter((f) => f.endsWith(".json")).sort();

interface Case {
  seen: string[];
  frozen: unknown[];
  messages: unknown[];
  tail: unknown;
  edits: unknown[];
  expected: unknown[];
}

function load(file: string): Case {
  return JSON.parse(readFileSync(join(DIR, file), "utf8")) as Case;
}

test("there are at least 8 golden cases", () => {
  assert.ok(CASES.length >= 8, `only ${CASES.length}`);
});

for (const file of CASES) {
  test(`describeTail matches Python: ${file}`, () => {
    const c = load(file);
    assert.deepStrictEqual(describeTail(c.messages, new Set(c.seen)), c.tail);
  });

  test(`applyEdits matches Python byte for byte: ${file}`, () => {
    const c = load(file);
    const before = JSON.stringify(c.messages);
    const sent = applyEdits(c.messages, [...c.frozen, ...c.edits]);
    assert.deepStrictEqual(sent, c.expected);
    assert.equal(JSON.stringify(sent), JSON.stringify(c.expected));
    assert.equal(JSON.stringify(c.messages), before, "input mutated");
  });
}

test("untouched messages pass through as the same objects", () => {
  const c = load("tombstone.json");
  const sent = applyEdits(c.messages, c.edits);
  assert.equal(sent[0], c.messages[0]);
  assert.equal(sent[2], c.messages[2]);
  assert.notEqual(sent[3], c.messages[3]);
  const none = applyEdits(c.messages, []);
  assert.notEqual(none, c.messages);
  assert.deepStrictEqual(none, c.messages);
});

test("applyEdits never throws on garbage", () => {
  const junk: unknown[] = [null, 3, "x", [], { role: "assistant", content: "text" }];
  const edits: unknown[] = [null, { kind: "remove", toolCallId: "a" }, { kind: 1 }];
  assert.deepStrictEqual(applyEdits(junk, edits), junk);
});

test("FNV-1a 64 test vectors", () => {
  assert.equal(fnv1a64(""), "cbf29ce484222325");
  assert.equal(fnv1a64("a"), "af63dc4c8601ec8c");
  assert.equal(fnv1a64("foobar"), "85944171f73967e8");
});

test("canon sorts keys by UTF-16 code units and formats like JSON.stringify", () => {
  assert.equal(canon({ b: 1, a: [1.5, null, true], "😀": 0, "\uffff": 0 }),
    '{"a":[1.5,null,true],"b":1,"😀":0,"\uffff":0}');
  assert.equal(argsSig("read", { path: "a.py" }), argsSig("read", { path: "a.py" }));
  assert.notEqual(argsSig("read", { path: "a.py" }), argsSig("read", { path: "b.py" }));
});

test("tailIds and allToolCallIds cover calls and results", () => {
  const c = load("write_strip.json");
  const tail = describeTail(c.messages, new Set());
  assert.deepStrictEqual(new Set(tailIds(tail)), new Set(["w1", "w2"]));
  assert.deepStrictEqual(new Set(allToolCallIds(c.messages)), new Set(["w1", "w2"]));
  assert.equal(describeTail(c.messages, new Set(tailIds(tail))).messages.length, 0);
});

test("an edit strip with a bad minChars is ignored, as in Python", () => {
  const c = load("edit_strip.json");
  for (const minChars of [undefined, "300", 0, -5, true, 1.5]) {
    const bad = (c.edits as Record<string, unknown>[]).map((e) => ({ ...e, minChars }));
    assert.deepStrictEqual(applyEdits(c.messages, bad), c.messages);
  }
  const asFloat = (c.edits as Record<string, unknown>[]).map((e) => ({ ...e, minChars: 300.0 }));
  assert.deepStrictEqual(applyEdits(c.messages, asFloat), c.expected);
});
