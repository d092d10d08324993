// /ctx-stats is drawn for the terminal's width (issue 44, item 12), read as pi's TUI reads it,
// less pi's one column of padding on each side of a notice; it used to be 90 whatever the
// terminal. The end-to-end version (real pi at 60 columns) is in tests/e2e/test_widths_e2e.py.
// Run: node --test tests/node/

import assert from "node:assert/strict";
import { test } from "node:test";

import { ctxStatsWidth } from "../../ctxwrap/_bridge/ctxwrap-bridge.ts";

test("the terminal's columns, less pi's padding", () => {
  assert.equal(ctxStatsWidth(60, undefined), 58);
  assert.equal(ctxStatsWidth(200, "60"), 198); // the terminal wins over COLUMNS, as in pi-tui
});

test("COLUMNS when stdout is no terminal, else pi's 80", () => {
  assert.equal(ctxStatsWidth(undefined, "60"), 58);
  assert.equal(ctxStatsWidth(0, "72"), 70);
  assert.equal(ctxStatsWidth(undefined, undefined), 78);
  assert.equal(ctxStatsWidth(undefined, "junk"), 78);
});

test("within what the daemon accepts", () => {
  assert.equal(ctxStatsWidth(10, undefined), 20);
  assert.equal(ctxStatsWidth(5000, undefined), 1000);
});
