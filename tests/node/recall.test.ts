// How pi's model gets a hidden output back: `ctxwrap recall` in its bash, or the bridge's
// ctx_recall tool where that cannot run.
import assert from "node:assert/strict";
import { chmodSync, mkdtempSync, mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { shellRecall } from "../../ctxwrap/_bridge/ctxwrap-bridge.ts";

function binDir(mode: number): string {
	const dir = mkdtempSync(join(tmpdir(), "ctxwrap-recall-"));
	const exe = join(dir, "ctxwrap");
	writeFileSync(exe, "#!/bin/sh\n");
	chmodSync(exe, mode);
	return dir;
}

test("bash active and an executable ctxwrap on PATH: recall through bash", () => {
	const bin = binDir(0o755);
	assert.equal(shellRecall(["read", "bash"], `/nonexistent:${bin}`, ""), true);
});

test("no bash, no ctxwrap, a file that is not executable: keep ctx_recall", () => {
	const bin = binDir(0o755);
	assert.equal(shellRecall(["read", "edit"], bin, ""), false);
	assert.equal(shellRecall(["bash"], "/nonexistent:/also-not", ""), false);
	assert.equal(shellRecall(["bash"], binDir(0o644), ""), false);
	const dir = mkdtempSync(join(tmpdir(), "ctxwrap-recall-"));
	mkdirSync(join(dir, "ctxwrap")); // a directory of that name is no command
	assert.equal(shellRecall(["bash"], dir, ""), false);
});

test("a relative PATH entry does not count: it names a different place in every cwd", () => {
	const bin = binDir(0o755);
	const rel = join("..", "..", "..", "..", "..", "..", "..", "..", bin);
	assert.equal(shellRecall(["bash"], rel, ""), false);
});

test("PI_CTX_RECALL=tool keeps the tool whatever the PATH holds", () => {
	const bin = binDir(0o755);
	assert.equal(shellRecall(["bash"], bin, "tool"), false);
	assert.equal(shellRecall(["bash"], bin, "TOOL"), false);
	assert.equal(shellRecall(["bash"], bin, "auto"), true);
});
