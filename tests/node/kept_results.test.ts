// Which results the pi bridge gives the daemon only to keep for masking: the same list as the
// daemon's `mechanisms.keeps_result_of` (tests/fixtures/kept_results.json, both sides).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { keepsResultOf } from "../../ctxwrap/_bridge/ctxwrap-bridge.ts";

const FILE = join(dirname(fileURLToPath(import.meta.url)), "..", "fixtures", "kept_results.json");

test("a tool no other mechanism takes is kept; bash, reads, writes and ctxwrap's own are not", () => {
	const cases = JSON.parse(readFileSync(FILE, "utf8")) as Record<string, unknown>;
	const names = Object.keys(cases).filter((k) => k !== "_");
	assert.ok(names.length >= 20);
	for (const name of names) assert.equal(keepsResultOf(name), cases[name], name);
});
