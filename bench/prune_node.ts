// The bridge's `context` edit step on a large session, timed in node (issue 5: p99 ≤ 5 ms).
// Run by bench/prune.py, which starts a real daemon and passes its socket:
//
//     node bench/prune_node.ts --socket PATH --session ID [--iterations 2000] [--warmup 200]
//
// Per call it does what onContext in ctxwrap/_bridge/ctxwrap-bridge.ts does, in the same order:
//   describe  describeTail(messages, seen) + tailIds          (edits.ts, imported)
//   daemon    POST /v1/context with the tail descriptor        (real socket, keep-alive agent)
//   apply     applyEdits(messages, frozen edits)               (edits.ts, imported)
//   measure   the bridge's `measure` (sizeOf/editSaving caches) — copied below, because
//             ctxwrap-bridge.ts does not export it; keep it in step with that file
//   notify    the synchronous part of the fire-and-forget POST /v1/llm_call
// The conversation is ~1,000 messages / ~5 MB with ~50 frozen edits; every call appends a new
// assistant + toolResult pair (the unseen tail), as a real agent turn does. Every BLOCK calls the
// appended rounds are dropped again (the same message objects stay at the same indexes, so the
// bridge's caches stay valid, as in a real session), keeping the size at 1,000 ± 2·BLOCK.
// Prints one JSON object on stdout.
import http from "node:http";
import { performance } from "node:perf_hooks";
import { ContextMeter } from "../ctxwrap/_bridge/ctxwrap-bridge.ts";
import { applyEdits, asEdit, describeTail, tailIds, type Edit, type Tail } from "../ctxwrap/_bridge/edits.ts";

type Json = Record<string, any>;

const args = new Map<string, string>();
for (let i = 2; i < process.argv.length; i += 2) args.set(process.argv[i].replace(/^--/, ""), process.argv[i + 1]);
const SOCKET = args.get("socket") ?? "";
const SESSION = args.get("session") ?? "bench-prune";
const ITER = Number(args.get("iterations") ?? 2000);
const WARMUP = Number(args.get("warmup") ?? 200);
const MESSAGES = Number(args.get("messages") ?? 1000);
const TARGET_BYTES = Number(args.get("bytes") ?? 5_000_000);
const EDITS = Number(args.get("edits") ?? 50);

// -- the synthetic session -------------------------------------------------------------------

const BLOCK = 10;
const ROUNDS = Math.floor((MESSAGES - 1) / 2) - BLOCK / 2;
const RESULT_CHARS = Math.floor(TARGET_BYTES / ROUNDS) - 200;
let clock = 1_700_000_000_000;

function filler(n: number, seed: number): string {
	const line = `${seed.toString(16).padStart(6, "0")}: const value_${seed} = compute(input[${seed}], options); // some source text\n`;
	return line.repeat(Math.ceil(n / line.length)).slice(0, n);
}

function round(i: number): [Json, Json] {
	const id = `call_${i}`;
	const tool = i % 10 === 7 ? "write" : i % 3 === 0 ? "bash" : "read";
	const argsObj =
		tool === "write"
			? { path: `src/file_${i}.ts`, content: filler(4000, i) }
			: tool === "bash"
				? { command: `npm test -- --grep case_${i}` }
				: { path: `src/module_${i}.ts` };
	const assistant = {
		role: "assistant",
		content: [
			{ type: "text", text: `Looking at step ${i}.` },
			{ type: "toolCall", id, name: tool, arguments: argsObj },
		],
		api: "openai-completions",
		provider: "bench",
		model: "bench-model",
		usage: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, totalTokens: 0 },
		stopReason: "toolUse",
		timestamp: clock++,
	};
	const result = {
		role: "toolResult",
		toolCallId: id,
		toolName: tool,
		content: [{ type: "text", text: tool === "write" ? `Successfully wrote src/file_${i}.ts` : filler(RESULT_CHARS, i) }],
		isError: false,
		timestamp: clock++,
	};
	return [assistant, result];
}

const head: Json[] = [{ role: "user", content: [{ type: "text", text: "Refactor the whole project." }], timestamp: clock++ }];
let history: Json[] = [];
for (let i = 0; i < ROUNDS; i++) history.push(...round(i));
let next = ROUNDS;
const BASE = history.length;

// Frozen edits, as the bridge holds them: tombstones on read/bash results, a few silent
// removals, and write-argument strips on write calls, spread over the whole history.
const frozen: Edit[] = [];
{
	const writes = history.filter((m) => m.role === "assistant" && m.content[1].name === "write").map((m) => m.content[1].id);
	const others = history.filter((m) => m.role === "toolResult" && m.toolName !== "write").map((m) => m.toolCallId);
	const nStrip = Math.min(Math.round(EDITS * 0.2), writes.length);
	const nRemove = Math.round(EDITS * 0.1);
	const nTomb = EDITS - nStrip - nRemove;
	const pick = (ids: string[], n: number, off: number) =>
		Array.from({ length: n }, (_, k) => ids[Math.floor(((k + off / 10) * ids.length) / n)]);
	for (const id of pick(writes, nStrip, 3))
		frozen.push({ kind: "strip_write", toolCallId: id, text: "[content stripped by ctxwrap: 4,000 bytes]", savedChars: 3960 });
	for (const id of pick(others, nTomb, 1))
		frozen.push({ kind: "tombstone", toolCallId: id, text: `[ctxwrap: read ${id} was judged not needed and hidden]`, savedChars: RESULT_CHARS - 60 });
	for (const id of pick(others, nRemove, 5)) if (!frozen.some((e) => e.toolCallId === id)) frozen.push({ kind: "remove", toolCallId: id, savedChars: RESULT_CHARS });
}
const editsById = new Map<string, Edit[]>();
for (const e of frozen) editsById.set(e.toolCallId, [...(editsById.get(e.toolCallId) ?? []), e]);
const digests = new Map<string, number>();
for (const m of history) if (m.role === "toolResult" && m.toolName === "bash") digests.set(m.toolCallId, 20_000);

// -- the bridge's own meter (imported, not copied) ---------------------------------------------

const meter = new ContextMeter();
const skillsRemoved = 12_000;
const ownToolsChars = 900;
const toolsChars = 9_000;
function measure(raw: any[]) {
	const m = meter.measure(raw, editsById, digests);
	const system = m.system || 30_000; // ctx.getSystemPrompt().length in the bridge (0.73)
	const saved = { bash: m.bash, amnesia: m.amnesia, writes: m.writes, skills: skillsRemoved, tools: -ownToolsChars };
	return { sent: { system, messages: m.messages, tools: toolsChars }, saved };
}

// -- the daemon, over the same kind of agent the bridge uses ---------------------------------

const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });
function post(path: string, body: unknown): Promise<{ status: number; body: string; sentBytes: number }> {
	const payload = JSON.stringify(body);
	return new Promise((resolve, reject) => {
		const req = http.request(
			{
				socketPath: SOCKET,
				path,
				method: "POST",
				agent,
				headers: { "content-type": "application/json", "content-length": Buffer.byteLength(payload) },
			},
			(res) => {
				const chunks: Buffer[] = [];
				res.on("data", (c: Buffer) => chunks.push(c));
				res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8"), sentBytes: Buffer.byteLength(payload) }));
				res.on("error", reject);
			},
		);
		req.on("error", reject);
		req.end(payload);
	});
}

// -- the loop --------------------------------------------------------------------------------

const seen = new Set<string>();
for (const m of history) if (m.role === "toolResult") seen.add(m.toolCallId);
for (const m of history) if (m.role === "assistant") seen.add(m.content[1].id);

const parts = ["describe", "daemon", "apply", "measure", "notify", "total"] as const;
const times: Record<(typeof parts)[number], number[]> = { describe: [], daemon: [], apply: [], measure: [], notify: [], total: [] };
const sentBytes: number[] = [];
const tailLens: number[] = [];
let conversationBytes = 0;
let messageCount = 0;
let sentMessages = 0;
let callIndex = 0;
let daemonEdits = 0;

// Between two `context` events pi waits for the model, so the previous llm_call has long been
// stored; wait for it (untimed) instead of queueing it in front of the next /v1/context.
let lastNotify: Promise<void> = Promise.resolve();

async function oneCall(record: boolean): Promise<void> {
	await lastNotify;
	// A new tool round arrives: the unseen tail of this call.
	if (history.length >= BASE + 2 * BLOCK) history.length = BASE;
	history.push(...round(next++));
	const messages = [...head, ...history];

	const t0 = performance.now();
	const tail: Tail = describeTail(messages, seen);
	const inTail = new Set(tailIds(tail));
	const t1 = performance.now();
	let t2 = t1;
	if (tail.messages.length > 0) {
		const body = { session_id: SESSION, call_index: callIndex, message_count: messages.length, head_changed: false, tail };
		const reply = await post("/v1/context", body);
		if (reply.status !== 200) throw new Error(`POST /v1/context: ${reply.status} ${reply.body}`);
		for (const raw of (JSON.parse(reply.body) as Json).edits ?? []) if (asEdit(raw)) daemonEdits++;
		if (record) sentBytes.push(reply.sentBytes);
		t2 = performance.now();
	}
	for (const id of inTail) seen.add(id);
	const sent = frozen.length ? applyEdits(messages, frozen) : messages;
	const t3 = performance.now();
	const { sent: sentChars, saved } = measure(messages);
	const t4 = performance.now();
	lastNotify = post(
		"/v1/llm_call",
		{ session_id: SESSION, call_index: callIndex, message_count: sent.length, head_changed: false, sent_chars: sentChars, saved_chars: saved },
	).then(() => undefined);
	const t5 = performance.now();
	callIndex++;
	if (record) {
		times.describe.push(t1 - t0);
		times.daemon.push(t2 - t1);
		times.apply.push(t3 - t2);
		times.measure.push(t4 - t3);
		times.notify.push(t5 - t4);
		times.total.push(t5 - t0);
		tailLens.push(tail.messages.length);
		messageCount = Math.max(messageCount, messages.length);
		sentMessages = messages.length - sent.length; // removed by the frozen edits
		if (conversationBytes === 0) conversationBytes = Buffer.byteLength(JSON.stringify(messages));
	}
}

function pct(xs: number[], p: number): number {
	const s = [...xs].sort((a, b) => a - b);
	return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)];
}

async function main(): Promise<void> {
	for (let i = 0; i < WARMUP; i++) await oneCall(false);
	for (let i = 0; i < ITER; i++) {
		await oneCall(true);
	}
	await new Promise((r) => setTimeout(r, 200));
	const stats: Json = {};
	for (const p of parts) stats[p] = { p50: pct(times[p], 50), p99: pct(times[p], 99), max: Math.max(...times[p]) };
	process.stdout.write(
		JSON.stringify({
			iterations: ITER,
			messages: messageCount,
			removed_messages: sentMessages,
			conversation_bytes: conversationBytes,
			frozen_edits: frozen.length,
			tail_messages: { p50: pct(tailLens, 50), max: Math.max(...tailLens) },
			context_request_bytes: { p50: pct(sentBytes, 50), max: Math.max(...sentBytes) },
			daemon_edits: daemonEdits,
			ms: stats,
			node: process.version,
		}) + "\n",
	);
	agent.destroy();
}

main().catch((err) => {
	process.stderr.write(`prune_node: ${err?.stack ?? err}\n`);
	process.exit(1);
});
