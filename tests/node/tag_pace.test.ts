// The bridge's wait for a request's tags (issue 43): the same rule as the proxies'
// agents/_proxy/tag_wait.py (tests/unit/mechanisms/test_late_tags.py). A tagger slower than
// tag_wait_ms is waited for once (TAG_FIRST_WAIT_MS) and then never; a fast one always.
// The end-to-end version (real pi, a slow scripted tagger): tests/e2e/test_pi_late_tags.py.
// Run: node --test tests/node/

import assert from "node:assert/strict";
import { test } from "node:test";

import { TAG_FIRST_WAIT_MS, TagPace } from "../../ctxwrap/_bridge/ctxwrap-bridge.ts";

function clock() {
  const c = { t: 1000, now: () => c.t };
  return c;
}

test("a slow tagger is waited for once, then never", () => {
  const c = clock();
  const pace = new TagPace(c.now);
  assert.equal(pace.allowance(400), TAG_FIRST_WAIT_MS); // nothing measured yet
  const a = pace.begin();
  c.t += 300; // past the first wait, still running
  assert.equal(pace.allowance(400), 0);
  c.t += 500;
  pace.end(a); // 0.8 s
  assert.equal(pace.allowance(400), 0);
  const b = pace.begin();
  c.t += 800;
  pace.end(b);
  assert.equal(pace.allowance(400), 0);
});

test("a fast tagger is waited for, the whole budget; a slow spell stops the waits", () => {
  const c = clock();
  const pace = new TagPace(c.now);
  for (let i = 0; i < 3; i++) {
    const t = pace.begin();
    c.t += 50;
    pace.end(t);
  }
  assert.equal(pace.allowance(400), 400);
  const slow = pace.begin();
  c.t += 500; // one round running past the budget: counted, but the median still fits
  assert.equal(pace.allowance(400), 400);
  pace.end(slow);
  const slower = pace.begin();
  c.t += 900;
  pace.end(slower); // two of the last three past the budget
  assert.equal(pace.allowance(400), 0);
});

test("no budget, no wait; a budget under the first wait is the first wait", () => {
  const pace = new TagPace(clock().now);
  assert.equal(pace.allowance(0), 0);
  assert.equal(pace.allowance(100), 100);
  pace.end(12345); // an unknown token changes nothing
  assert.equal(pace.allowance(400), TAG_FIRST_WAIT_MS);
});

test("a pace the daemon knew at registration replaces the blind first wait", () => {
  const c = clock();
  const slow = new TagPace(c.now);
  slow.known([800, 820, 790]); // the registration reply's tag_pace_ms
  assert.equal(slow.allowance(400), 0); // before: TAG_FIRST_WAIT_MS for a 0.8 s tagger
  const fast = new TagPace(c.now);
  fast.known([40, 55]);
  assert.equal(fast.allowance(400), 400);
  const measured = new TagPace(c.now);
  measured.end(measured.begin()); // measured in this process: that wins
  measured.known([900, 900, 900]);
  assert.equal(measured.allowance(400), 400);
  for (const odd of [undefined, null, "800", [true, "x", -5, Infinity], { ms: 800 }]) {
    const p = new TagPace(c.now);
    p.known(odd);
    assert.equal(p.allowance(400), TAG_FIRST_WAIT_MS);
  }
});
