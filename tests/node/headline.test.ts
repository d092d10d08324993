// pi's footer shows the daemon's headline verbatim (issue 22: one headline in every view).
// Run: node --test tests/node/headline.test.ts
import { test } from "node:test";
import assert from "node:assert/strict";
import { statusText } from "../../ctxwrap/_bridge/ctxwrap-bridge.ts";

test("status line takes the daemon's headline as is", () => {
  const totals = { saved_tokens: 1200, net_tokens: 1000, cost_saved_pct: 59.5, saved_usd: 0.125, headline: "cost −60% · $0.13 saved" };
  assert.equal(statusText(totals), "ctxwrap: saved 1,200 tok · net 1,000 · cost −60% · $0.13 saved");
  // nothing priced yet: no cost claim
  assert.equal(statusText({ saved_tokens: 0, net_tokens: 0, headline: "" }), "ctxwrap: saved 0 tok · net 0");
});
