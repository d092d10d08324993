// How pi's model gets a hidden output back: `ctxwrap recall` in its bash, or the bridge's
// ctx_recall tool where that cannot run.
import assert from "node:assert/strict";
import { chmodSync, mkdtempSync, mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { historyNamesRecallTool, shellRecall } from "../../ctxwrap/_bridge/ctxwrap-bridge.ts";

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

test("a history that points at ctx_recall keeps the tool when the session is resumed", () => {
	const tomb = '[ctxwrap: read a.ts (9,000 chars) was hidden: …; recall with ctx_recall(handle="r1a2b3c4d", pattern=...)]';
	const state = { type: "custom", customType: "ctxwrap-state", data: { edits: [{ kind: "mask", toolCallId: "t1", text: tomb }] } };
	const digest = {
		type: "message",
		message: { role: "toolResult", content: [{ type: "text", text: `[digested by ctxwrap …] ${tomb}` }] },
	};
	const called = {
		type: "message",
		message: { role: "assistant", content: [{ type: "toolCall", name: "ctx_recall", arguments: {} }] },
	};
	const shell = {
		type: "message",
		message: { role: "toolResult", content: [{ type: "text", text: "recall with the shell command `ctxwrap recall r1a2b3c4d PATTERN`" }] },
	};
	assert.equal(historyNamesRecallTool([state]), true);
	assert.equal(historyNamesRecallTool([digest]), true);
	assert.equal(historyNamesRecallTool([called]), true);
	assert.equal(historyNamesRecallTool([{ type: "message", message: { role: "user", content: tomb } }]), true);
	// a session that only ever recalled through bash, or none at all, goes on without the tool
	assert.equal(historyNamesRecallTool([shell]), false);
	assert.equal(historyNamesRecallTool([]), false);
	assert.equal(historyNamesRecallTool([null, { type: "custom", customType: "other", data: { edits: [{ text: tomb }] } }]), false);
});
