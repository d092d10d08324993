/**
 * ctxwrap bridge: a pi extension that forwards pi's events to the ctxwrap daemon and applies
 * its decisions. Loaded with `pi -e ctxwrap-bridge.ts` by `ctxwrap pi`.
 *
 * Rules this file lives by (docs/architecture.md):
 * - It never throws while loading: a load error makes pi exit 1.
 * - Every daemon call has a deadline; on any failure pi behaves as plain pi, except that a
 *   bash output over the threshold is still cut to a tail here (DESIGN.md invariant 1).
 * - Edits are frozen: decided once for the unseen tail, persisted with appendEntry, and
 *   replayed identically on every later request (invariant 3).
 * - Only node: builtins at runtime; types are erased by pi's loader. One file serves pi 1.x
 *   (@earendil-works) and 0.73 (@mariozechner).
 */
import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";
import * as http from "node:http";
import { spawn } from "node:child_process";
import { createHash, randomUUID } from "node:crypto";
import { appendFileSync, lstatSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { homedir, tmpdir } from "node:os";
import { allToolCallIds, applyEdits, asEdit, describeTail, tailIds, type Edit, type Tail } from "./edits.ts";
import { acceptableMasks, boundByThinking, callPaths, checksThinkingPrefix, coldReason, lastRequestAt, payloadTtlS, type CacheState } from "./masking.ts";

// -- configuration ---------------------------------------------------------------------------

interface BridgeConfig {
	off: boolean;
	bash: boolean;
	bash_min_tokens: number;
	bash_fallback_bytes: number;
	amnesia: boolean;
	amnesia_min_tokens: number;
	lazy: boolean;
	lazy_skills: boolean;
	aux_backend: string;
	aux_model: string | null;
	aux_timeout_ms: number;
	stats_widget: boolean;
	write: boolean;
	write_min_bytes: number;
	bridge_timeout_ms: number;
	tag_wait_ms: number;
	mask: boolean;
	mask_warm: boolean;
	mask_min_chars: number;
	cache_ttl_s: number;
	compact_like_plain: boolean;
}

const env = process.env;
const flag = (v: string | undefined, dflt: boolean): boolean =>
	v === undefined || v === "" ? dflt : v === "1" || v.toLowerCase() === "true" || v.toLowerCase() === "yes";
const num = (v: string | undefined, dflt: number): number => {
	const n = v === undefined || v === "" ? NaN : Number(v);
	return Number.isFinite(n) && n >= 0 ? n : dflt;
};

/** Used until the daemon answers session_start, and whenever it cannot. */
function envConfig(): BridgeConfig {
	return {
		off: flag(env.PI_CTX_OFF, false),
		bash: flag(env.PI_CTX_BASH, true),
		bash_min_tokens: num(env.PI_CTX_BASH_MIN_TOKENS, 2000),
		bash_fallback_bytes: num(env.PI_CTX_BASH_FALLBACK_BYTES, 3000),
		amnesia: flag(env.PI_CTX_AMNESIA, true),
		amnesia_min_tokens: num(env.PI_CTX_AMNESIA_MIN_TOKENS, 250),
		lazy: flag(env.PI_CTX_LAZY, true),
		lazy_skills: flag(env.PI_CTX_LAZY_SKILLS, true),
		aux_backend: env.PI_CTX_AUX_BACKEND || "pi",
		aux_model: env.PI_CTX_AUX_MODEL || null,
		aux_timeout_ms: num(env.PI_CTX_AUX_TIMEOUT_MS, 20000),
		stats_widget: flag(env.PI_CTX_STATS_WIDGET, true),
		// "auto" (the default) is off under pi: the daemon's AgentProfile.write_strip
		write: flag(env.PI_CTX_WRITE, false),
		write_min_bytes: num(env.PI_CTX_WRITE_MIN_BYTES, 400),
		bridge_timeout_ms: num(env.PI_CTX_BRIDGE_TIMEOUT_MS, 1500),
		tag_wait_ms: num(env.PI_CTX_TAG_WAIT_MS, 400),
		mask: flag(env.PI_CTX_MASK, true),
		mask_warm: flag(env.PI_CTX_MASK_WARM, false),
		mask_min_chars: num(env.PI_CTX_MASK_MIN_CHARS, 500),
		cache_ttl_s: num(env.PI_CTX_CACHE_TTL_S, 300),
		compact_like_plain: flag(env.PI_CTX_COMPACT_LIKE_PLAIN, true),
	};
}

// -- daemon transport ------------------------------------------------------------------------

/** Opt-in trace for debugging the bridge itself: CTXWRAP_BRIDGE_LOG=/path/to/file. */
function trace(msg: string): void {
	if (!env.CTXWRAP_BRIDGE_LOG) return;
	try {
		appendFileSync(env.CTXWRAP_BRIDGE_LOG, `${new Date().toISOString()} ${process.pid} ${msg}\n`);
	} catch {}
}

// Same rule as ctxwrap/paths.py: a relative XDG_RUNTIME_DIR counts as unset, and the /tmp
// fallback names the state dir its daemon serves (one per HOME). `ctxwrap pi` passes its path.
export function fallbackRuntimeDir(): string {
	const stateHome = env.XDG_STATE_HOME?.startsWith("/") ? env.XDG_STATE_HOME : join(homedir(), ".local", "state");
	const tag = createHash("sha256").update(join(stateHome, "ctxwrap")).digest("hex").slice(0, 10);
	return `/tmp/ctxwrap-${process.getuid?.() ?? 0}-${tag}`;
}
const SOCKET =
	env.CTXWRAP_SOCKET ||
	(env.XDG_RUNTIME_DIR?.startsWith("/")
		? `${env.XDG_RUNTIME_DIR}/ctxwrap/daemon.sock`
		: `${fallbackRuntimeDir()}/daemon.sock`);
const PROTOCOL = 3;

/**
 * Why the socket must not be used, checked before every connection (same rules as
 * check_socket in ctxwrap/paths.py): "missing" when nothing is there, a reason when the
 * directory or the socket could be another user's (a planted /tmp/ctxwrap-<uid>), or null.
 */
export function socketRefusal(sock: string): string | null {
	const uid = process.getuid?.();
	if (uid === undefined) return null; // no uids (Windows): nothing to compare
	const dir = dirname(sock);
	let d;
	try {
		d = lstatSync(dir);
	} catch {
		return "missing";
	}
	if (d.isSymbolicLink()) return `${dir} is a symlink`;
	if (!d.isDirectory()) return `${dir} is not a directory`;
	if (d.uid !== uid) return `${dir} is owned by uid ${d.uid}, not ${uid}`;
	if (d.mode & 0o077) return `${dir} has mode ${(d.mode & 0o777).toString(8)}, open to other users`;
	let s;
	try {
		s = lstatSync(sock);
	} catch {
		return "missing";
	}
	if (!s.isSocket()) return `${sock} is not a socket`;
	if (s.uid !== uid) return `${sock} is owned by uid ${s.uid}, not ${uid}`;
	return null;
}
// After a timeout, decision calls are skipped for this long, so a hung daemon costs one
// deadline, not one per event.
const SUSPEND_AFTER_TIMEOUT_MS = 5000;
// A registration carries the catalog and may meet a daemon still starting: more time than a decision.
const REGISTER_DEADLINE_MS = 5000;
const RESTART_EVERY_MS = 10000;
// Statistics records kept while the daemon is away (~300 bytes each).
const STATS_QUEUE_MAX = 2000;
// At shutdown, how long undelivered statistics may wait for a restarted daemon.
const STATS_SHUTDOWN_WAIT_MS = 3000;

/** A reply with its HTTP status; status 0: no answer (refused, reset, deadline, suspended). */
interface Answer<T> {
	status: number;
	value: T | null;
}

class Daemon {
	private agent = new http.Agent({ keepAlive: true, maxSockets: 8 });
	private suspendedUntil = 0;
	// `ctxwrap pi` starts the daemon beside pi (CTXWRAP_DAEMON_LAUNCHING): not yet listening is
	// expected then, and starting a second one would only compete for the CPU.
	private launching = env.CTXWRAP_DAEMON_LAUNCHING === "1";
	private lastRestart = this.launching ? Date.now() : 0;
	private registering: Promise<boolean> | null = null;
	/** When the daemon last answered anything (0: never, in this process). */
	lastAnswerAt = 0;
	instance: string | null = null;
	onInstanceChange: (() => void) | null = null;
	/** Registers this session again (awaited); true when the daemon took it. */
	onUnknownSession: (() => Promise<boolean>) | null = null;

	/**
	 * Like call(), but when nobody listens (daemon killed) it waits for the restarted daemon,
	 * up to `waitMs`, and tries once more. For calls worth a short wait: a bash digest.
	 */
	async callOrRevive<T>(path: string, body: unknown, deadlineMs: number, waitMs: number): Promise<T | null> {
		const first = await this.call<T>(path, body, deadlineMs);
		if (first !== null || !this.gone || !env.CTXWRAP_DAEMON_START) return first;
		if (!(await this.revive(waitMs))) return null;
		return this.call<T>(path, body, deadlineMs);
	}

	/** Waits up to `waitMs` for a daemon to answer health again; tells the session it is new. */
	async revive(waitMs: number): Promise<boolean> {
		const until = Date.now() + waitMs;
		while (Date.now() < until) {
			// Not unref'd: pi awaits this (a bash digest) and an empty event loop would end `pi -p`.
			await new Promise((r) => setTimeout(r, 100));
			const health = await this.get<Json>("/v1/health", 300);
			if (health && health.protocol === PROTOCOL) {
				// A new daemon has not heard of this session: its instance header differs, which
				// noteInstance() reports (registering again). The same daemon, only slow a moment
				// ago, keeps the session: registering it again logged a second session_start.
				this.suspendedUntil = 0;
				return true;
			}
		}
		return false;
	}

	/** As after a deadline: refuse suspendable calls for a while. */
	suspend(): void {
		this.suspendedUntil = Date.now() + SUSPEND_AFTER_TIMEOUT_MS;
	}

	unsuspend(): void {
		this.suspendedUntil = 0;
	}

	/** A probe: never suspended, never suspends (a restarting daemon is slow, not hung). */
	async get<T>(path: string, deadlineMs: number): Promise<T | null> {
		return (await this.request<T>("GET", path, undefined, deadlineMs, false)).value;
	}

	/**
	 * `suspends` false: neither refused while the bridge is suspended nor suspending it on a
	 * deadline — for calls pi never waits on (notifications) and for a search the model asked for.
	 */
	async call<T>(path: string, body: unknown, deadlineMs: number, suspends = true): Promise<T | null> {
		return (await this.send<T>(path, body, deadlineMs, suspends)).value;
	}

	/**
	 * POST with its status. A 409 "unknown session" (a daemon that never heard of this session:
	 * our session_start was lost) registers the session again and retries once.
	 */
	async send<T>(path: string, body: unknown, deadlineMs: number, suspends = true): Promise<Answer<T>> {
		const first = await this.request<T>("POST", path, body, deadlineMs, suspends);
		if (first.status !== 409 || path === "/v1/sessions/start" || !this.onUnknownSession) return first;
		this.registering ??= this.onUnknownSession().finally(() => {
			this.registering = null;
		});
		if (!(await this.registering)) return first;
		return this.request<T>("POST", path, body, deadlineMs, suspends);
	}

	private refusedWhy: string | null = null;

	private request<T>(method: string, path: string, body: unknown, deadlineMs: number, suspends: boolean): Promise<Answer<T>> {
		if (suspends && Date.now() < this.suspendedUntil) return Promise.resolve({ status: 0, value: null });
		// Not a byte to a socket another user may own; pi goes on as plain pi (fail open).
		const refusal = socketRefusal(SOCKET);
		if (refusal === "missing") {
			trace(`${method} ${path}: no socket at ${SOCKET}`);
			this.restart();
			return Promise.resolve({ status: 0, value: null });
		}
		if (refusal !== null) {
			if (refusal !== this.refusedWhy) trace(`refusing the daemon socket: ${refusal}`);
			this.refusedWhy = refusal;
			return Promise.resolve({ status: 0, value: null });
		}
		this.refusedWhy = null;
		return new Promise<Answer<T>>((resolve) => {
			let done = false;
			const sentAt = Date.now();
			const finish = (status: number, v: T | null) => {
				if (!done) {
					done = true;
					trace(`${method} ${path}: ${status || "no answer"} in ${Date.now() - sentAt} ms`);
					clearTimeout(timer);
					resolve({ status, value: v });
				}
			};
			let payload = "";
			try {
				if (body !== undefined) payload = JSON.stringify(body);
			} catch {
				return resolve({ status: 0, value: null });
			}
			const req = http.request(
				{
					socketPath: SOCKET,
					path,
					method,
					agent: this.agent,
					headers: { "content-type": "application/json", "content-length": Buffer.byteLength(payload) },
				},
				(res) => {
					const chunks: Buffer[] = [];
					res.on("data", (c: Buffer) => chunks.push(c));
					res.on("end", () => {
						this.gone = false;
						this.lastAnswerAt = Date.now();
						if (this.launching) {
							this.launching = false; // it answered: from now on, not listening means dead
							this.lastRestart = 0;
						}
						this.noteInstance(res.headers["x-ctxwrap-instance"]);
						const status = res.statusCode ?? 500;
						if (status >= 400) return finish(status, null);
						try {
							finish(status, JSON.parse(Buffer.concat(chunks).toString("utf8")) as T);
						} catch {
							finish(status, null); // garbage from the daemon: fail open
						}
					});
					res.on("error", () => finish(0, null));
				},
			);
			const timer = setTimeout(() => {
				trace(`${method} ${path}: deadline ${deadlineMs} ms`);
				if (suspends) this.suspendedUntil = Date.now() + SUSPEND_AFTER_TIMEOUT_MS;
				req.destroy();
				finish(0, null);
			}, deadlineMs);
			req.on("error", (err: NodeJS.ErrnoException) => {
				trace(`${method} ${path}: ${err.code ?? ""} ${err.message}`);
				// Refused/missing: nobody listens. Reset/hang-up: a keep-alive socket to a daemon
				// that died. Either way it is gone, not slow.
				if (done) return;
				if (err.code === "ECONNREFUSED" || err.code === "ENOENT") this.restart();
				else if (["ECONNRESET", "EPIPE"].includes(err.code ?? "") || /socket hang up/.test(String(err.message))) {
					this.gone = true; // maybe just a stale keep-alive socket: callOrRevive probes before restarting
				}
				finish(0, null);
			});
			req.on("socket", (s) => s.unref()); // never keep `pi -p` alive
			req.end(payload);
		});
	}

	/** Fire-and-forget: for events that need no answer; never delays pi. */
	notify(path: string, body: unknown): void {
		// A notification's deadline still suspends the bridge: a hung daemon must cost one
		// deadline, not one per event (invariant 1). What the model asked for (the capability
		// search and the catalog it may resend) is tried even while suspended.
		void this.call(path, body, 3000);
	}

	private noteInstance(value: string | string[] | undefined): void {
		const v = Array.isArray(value) ? value[0] : value;
		if (!v) return;
		if (this.instance !== null && v !== this.instance) {
			this.instance = v;
			this.onInstanceChange?.();
		}
		this.instance = v;
	}

	/** Set when the last failure was "nobody listens" (as opposed to a timeout or bad answer). */
	gone = false;

	/** The daemon is gone (kill -9, crash): ask ctxwrap to start a new one, at most every 10 s. */
	private restart(): void {
		this.gone = true;
		const now = Date.now();
		trace(`daemon gone; restart ${now - this.lastRestart < RESTART_EVERY_MS ? "rate-limited" : "requested"}`);
		if (now - this.lastRestart < RESTART_EVERY_MS || !env.CTXWRAP_DAEMON_START) return;
		this.lastRestart = now;
		try {
			const argv = JSON.parse(env.CTXWRAP_DAEMON_START) as string[];
			const child = spawn(argv[0], argv.slice(1), { detached: true, stdio: "ignore" });
			child.on("error", () => {});
			child.unref();
		} catch {
			// nothing to do: stay in pass-through
		}
	}

	close(): void {
		this.agent.destroy();
	}
}

/**
 * Statistics records (/v1/llm_call, /v1/turn_end) in order, kept until the daemon has them.
 *
 * A daemon that is killed or restarting must not lose the session's figures: a record that got
 * no answer stays queued and goes out with the next one, on a retry timer, and once more at
 * shutdown (after waiting for a revived daemon). The queue is bounded; what falls off it, or is
 * refused, is counted and reported at shutdown so `ctxwrap stats` can mark the session incomplete.
 * Each record carries a `record_id` of its own: a daemon killed after storing one but before
 * answering gets it again, and records it once.
 */
export class StatsOutbox {
	private queue: { path: string; body: unknown; onReply?: (reply: Json | null) => void }[] = [];
	private flushing: Promise<void> | null = null;
	private retryTimer: ReturnType<typeof setTimeout> | null = null;
	/** Records this bridge will never deliver (dropped when full, or refused by the daemon). */
	lost = 0;

	private send: (path: string, body: unknown, deadlineMs: number) => Promise<Answer<Json>>;
	private max: number;
	private retryMs: number;
	private readonly origin = randomUUID(); // this bridge's records, as against a resumed one's
	private seq = 0;

	constructor(send: (path: string, body: unknown, deadlineMs: number) => Promise<Answer<Json>>, max = STATS_QUEUE_MAX, retryMs = 1000) {
		this.send = send;
		this.max = max;
		this.retryMs = retryMs;
	}

	get pending(): number {
		return this.queue.length;
	}

	push(path: string, body: unknown, onReply?: (reply: Json | null) => void): void {
		if (this.queue.length >= this.max) {
			this.queue.shift();
			this.lost++;
		}
		const record =
			body !== null && typeof body === "object" && !Array.isArray(body)
				? { ...(body as Record<string, unknown>), record_id: `${this.origin}:${this.seq++}` }
				: body;
		this.queue.push({ path, body: record, onReply });
		void this.flush();
	}

	/** Sends what is queued, oldest first; stops at the first record that got no answer. */
	flush(deadlineMs = 3000): Promise<void> {
		this.flushing ??= (async () => {
			while (this.queue.length) {
				const item = this.queue[0];
				const answer = await this.send(item.path, item.body, deadlineMs);
				if (answer.status === 0 || answer.status >= 500 || answer.status === 409) {
					this.scheduleRetry();
					return; // no answer (or a session it cannot place yet): keep it for later
				}
				this.queue.shift();
				if (answer.status >= 400) this.lost++; // refused: it will never count
				try {
					item.onReply?.(answer.value);
				} catch {}
			}
		})().finally(() => {
			this.flushing = null;
		});
		return this.flushing;
	}

	private scheduleRetry(): void {
		if (this.retryTimer) return;
		this.retryTimer = setTimeout(() => {
			this.retryTimer = null;
			void this.flush();
		}, this.retryMs);
		this.retryTimer.unref?.(); // never keep `pi -p` alive for statistics
	}

	close(): void {
		if (this.retryTimer) clearTimeout(this.retryTimer);
		this.retryTimer = null;
	}
}

// -- helpers ---------------------------------------------------------------------------------

/** pi spills bash output to join(os.tmpdir(), "pi-bash-<hex>.log"); this process is pi. */
function piTmpdir(): string | null {
	try {
		return tmpdir();
	} catch {
		return null;
	}
}

type Json = Record<string, any>;

const tokens = (chars: number) => Math.ceil(chars / 4);

function textOf(content: unknown): string {
	if (typeof content === "string") return content;
	if (!Array.isArray(content)) return "";
	let out = "";
	for (const b of content) if (b && b.type === "text" && typeof b.text === "string") out += (out ? "\n" : "") + b.text;
	return out;
}

/** Chars of a message as the provider receives it (text + tool-call arguments), chars/4 basis. */
export function messageChars(m: Json): number {
	const c = m.content;
	if (typeof c === "string") return c.length;
	if (!Array.isArray(c)) return typeof m.summary === "string" ? m.summary.length : (m.output?.length ?? 0);
	let n = 0;
	for (const b of c) {
		if (!b) continue;
		if (b.type === "text" && typeof b.text === "string") n += b.text.length;
		else if (b.type === "toolCall") n += (b.name?.length ?? 0) + JSON.stringify(b.arguments ?? {}).length;
		else if (b.type === "thinking" && typeof b.thinking === "string") n += b.thinking.length;
	}
	return n;
}

/** A message's identity within one list: stable while the list only grows. */
export const keyOf = (m: Json, i: number): string =>
	`${m?.role}:${m?.timestamp ?? ""}:${m?.toolCallId ?? m?.responseId ?? ""}:${i}`;

/**
 * Running size totals over the unedited message list, for the statistics.
 *
 * Within a prompt each call's list extends the last one and edits touch only new messages
 * (frozen, tail only), so only new messages are measured; anything else (compaction, resume,
 * a branch) starts over. System messages are measured every call: pi 1.x may rewrite them.
 * `messages` is what is sent (edited); the savings are size unedited - size edited, by the
 * same function, so the figures add up to what plain pi would have sent.
 */
export class ContextMeter {
	private n = 0;
	private lastKey = "";
	private msgs = 0;
	private bash = 0;
	private amnesia = 0;
	private masking = 0;
	private writes = 0;

	measure(
		raw: readonly any[],
		editsById: ReadonlyMap<string, readonly Edit[]>,
		digests: ReadonlyMap<string, number>,
	): { system: number; messages: number; bash: number; amnesia: number; masking: number; writes: number } {
		const last = this.n - 1;
		if (this.n > raw.length || (this.n > 0 && keyOf(raw[last], last) !== this.lastKey)) {
			this.n = this.msgs = this.bash = this.amnesia = this.masking = this.writes = 0;
		}
		let system = 0;
		for (let i = 0; i < raw.length; i++) {
			const m = raw[i];
			if (!m) continue;
			if (m.role === "system") {
				system += messageChars(m);
				continue;
			}
			if (i < this.n) continue;
			const size = messageChars(m);
			let sent = size;
			const ids =
				m.role === "toolResult"
					? [String(m.toolCallId)]
					: m.role === "assistant" && Array.isArray(m.content)
						? m.content.filter((b: any) => b?.type === "toolCall").map((b: any) => String(b.id))
						: [];
			const eds = ids.flatMap((id: string) => editsById.get(id) ?? []);
			if (eds.length) {
				const after = applyEdits([m], eds);
				sent = after.length ? messageChars(after[0] as Json) : 0;
				// A write or edit strip counts for writes, a history mask for masking; the tagger's
				// tombstones and silent removals for amnesia.
				if (eds.some((e) => e.kind === "strip_write" || e.kind === "strip_edit")) this.writes += size - sent;
				else if (eds.some((e) => e.kind === "mask")) this.masking += size - sent;
				else this.amnesia += size - sent;
			}
			if (m.role === "toolResult") this.bash += digests.get(String(m.toolCallId)) ?? 0;
			if (m.role === "custom" && m.customType === FACT_TYPE) this.writes -= size; // ctxwrap's own cost
			this.msgs += sent;
		}
		this.n = raw.length;
		this.lastKey = raw.length ? keyOf(raw[raw.length - 1], raw.length - 1) : "";
		return {
			system,
			messages: this.msgs,
			bash: this.bash,
			amnesia: this.amnesia,
			masking: this.masking,
			writes: this.writes,
		};
	}
}

const PI_NOTE = /\n*\[(?:Showing [^\]]*?)Full output: [^\]]*\]\s*/g;
const PI_TEMP = /\S*pi-bash-[0-9a-f]{8,}\.log/g;
const EXIT_LINE = /\n*(Command exited with code -?\d+|Command timed out after [\d.]+ seconds?|Command aborted)\s*$/;

/** Invariant 1's one exception: with no daemon, a huge bash result still enters only as a tail. */
function fallbackTail(text: string, maxBytes: number): string {
	const status = text.match(EXIT_LINE)?.[1];
	let body = (status ? text.replace(EXIT_LINE, "") : text).replace(PI_NOTE, "\n").replace(PI_TEMP, "[pi temp file]");
	const totalLines = body.split("\n").length;
	let tail = Buffer.from(body, "utf8").subarray(-maxBytes).toString("utf8");
	const nl = tail.indexOf("\n");
	if (nl >= 0 && nl < tail.length - 1) tail = tail.slice(nl + 1); // start on a whole line
	const shown = tail.split("\n").length;
	body =
		`[ctxwrap: output too large and the ctxwrap daemon is unavailable; showing the last ${shown} of ${totalLines} lines]\n` +
		tail;
	return status ? `${body}\n\n${status}` : body;
}

/** The skills catalog block pi puts in the system prompt (0.73 and 1.x wording). */
const SKILLS_BLOCK =
	/\n*(?:<skills>\n)?The following skills provide specialized instructions for specific tasks\.[\s\S]*?<\/available_skills>(?:\n<\/skills>)?/;

function stripSkills(prompt: string): { prompt: string; removed: number } {
	const m = SKILLS_BLOCK.exec(prompt);
	if (!m) return { prompt, removed: 0 };
	const out = prompt.slice(0, m.index) + prompt.slice(m.index + m[0].length);
	return { prompt: out, removed: prompt.length - out.length };
}

function modelRef(model: any): Json | null {
	if (!model || typeof model.provider !== "string" || typeof model.id !== "string") return null;
	// Registry prices and window for the cost model (docs/accounting.md); numbers only.
	const c = model.cost && typeof model.cost === "object" ? model.cost : {};
	const cost: Json = {};
	for (const k of ["input", "output", "cacheRead", "cacheWrite"]) if (Number.isFinite(c[k]) && c[k] >= 0) cost[k] = c[k];
	return {
		provider: model.provider,
		id: model.id,
		api: typeof model.api === "string" ? model.api : null,
		cost: Object.keys(cost).length ? cost : null,
		context_window: Number.isSafeInteger(model.contextWindow) && model.contextWindow > 0 ? model.contextWindow : null,
	};
}

function readJson(path: string): Json {
	try {
		const v = JSON.parse(readFileSync(path, "utf8"));
		return v && typeof v === "object" && !Array.isArray(v) ? v : {};
	} catch {
		return {};
	}
}

/**
 * pi's compaction settings as pi resolves them (docs/compaction.md, both 1.x and 0.73): the
 * agent dir's settings.json under the project's .pi/settings.json, merged; 1.x per-model
 * overrides first. Only numbers are taken from these files; they steer nothing but figures.
 */
export function compactionSettings(cwd: string, model: Json | null, trustGated = !piPackage().name.startsWith("@mariozechner")): Json {
	const dir = env.PI_CODING_AGENT_DIR ? env.PI_CODING_AGENT_DIR.replace(/^~(?=$|\/)/, homedir()) : join(homedir(), ".pi", "agent");
	const globalDoc = readJson(join(dir, "settings.json"));
	const global = globalDoc.compaction ?? {};
	// pi 1.x loads project settings only in a trusted project; a trust given interactively is
	// not visible here, so only "always" counts (pi's compaction event corrects the rest).
	const projectLoaded = !trustGated || globalDoc.defaultProjectTrust === "always";
	const project = projectLoaded ? (readJson(join(cwd, ".pi", "settings.json")).compaction ?? {}) : {};
	const merged: Json = { ...global, ...project };
	const overrides: Json = { ...(global.modelOverrides ?? {}) };
	for (const [k, v] of Object.entries(project.modelOverrides ?? {})) overrides[k] = { ...(overrides[k] ?? {}), ...(v as Json) };
	const own: Json = (model && overrides[`${model.provider}/${model.id}`]) || {};
	const int = (v: unknown) => (Number.isSafeInteger(v) && (v as number) >= 0 ? (v as number) : undefined);
	return {
		enabled: merged.enabled !== false,
		reserve_tokens: int(own.reserveTokens) ?? int(merged.reserveTokens) ?? 16384,
		keep_recent_tokens: int(own.keepRecentTokens) ?? int(merged.keepRecentTokens) ?? 20000,
	};
}

/** The status line: tokens kept out, then the cache-priced saving and compactions. */
export function statusText(totals: Json): string {
	const saved = Number(totals.saved_tokens) || 0;
	const net = Number(totals.net_tokens) || 0;
	let text = `ctxwrap: saved ${saved.toLocaleString()} tok · net ${net.toLocaleString()}`;
	const pct = totals.cost_saved_pct;
	if (typeof totals.headline === "string") {
		// views: the daemon's headline, the same text `ctxwrap stats` and /ctx-stats show
		if (totals.headline) text += ` · ${totals.headline}`;
	} else if (typeof pct === "number" && Number.isFinite(pct)) {
		const usd = totals.saved_usd;
		text += ` · cost ${pct >= 0 ? "−" : "+"}${Math.abs(pct).toFixed(0)}%`;
		if (typeof usd === "number" && Number.isFinite(usd)) text += ` (${usd >= 0 ? "" : "−"}$${Math.abs(usd).toFixed(2)})`;
	}
	const plainC = Number(totals.plain_compactions) || 0;
	const c = Number(totals.compactions) || 0;
	if (plainC || c) text += ` · compactions ${c}/${plainC} plain`;
	return text;
}

/** FNV-1a of a string: cheap identity for the cost model's prefix match, not security. */
function fnv(s: string): string {
	let h = 0x811c9dc5;
	for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
	return (h >>> 0).toString(36) + ":" + s.length;
}

type Block = [string, number];

/** A message's size in pi's summarisation request: tool results are cut to 2000 chars
 * (TOOL_RESULT_MAX_CHARS in pi's compaction/utils.js, 1.x and 0.73). */
export const summaryChars = (role: string, chars: number): number => (role === "toolResult" ? Math.min(chars, 2000) : chars);

/** Chars at the start of `cur` equal (identity and size) to the start of `prev`. */
export function prefixChars(prev: readonly Block[], cur: readonly Block[]): number {
	let n = 0;
	for (let i = 0; i < prev.length && i < cur.length; i++) {
		if (prev[i][0] !== cur[i][0] || prev[i][1] !== cur[i][1]) break;
		n += cur[i][1];
	}
	return n;
}

function piPackage(): { name: string; version: string | null } {
	return { name: env.CTXWRAP_PI_PACKAGE || "unknown", version: env.CTXWRAP_PI_VERSION || null };
}

// -- aux calls through pi's own provider code ------------------------------------------------

interface AuxRequest {
	aux_id: string;
	task: string;
	system: string;
	prompt: string;
	max_tokens: number;
	timeout_ms: number;
}

interface AuxOutcome {
	text: string | null;
	error: string | null;
	input_tokens: number;
	output_tokens: number;
	model: string | null;
	elapsed_ms: number;
}

async function resolveAuxModel(ctx: any, cfg: BridgeConfig): Promise<any> {
	const wanted = cfg.aux_model;
	if (wanted && ctx.modelRegistry) {
		const [provider, ...rest] = wanted.includes("/") ? wanted.split("/") : [ctx.model?.provider, wanted];
		const found = ctx.modelRegistry.find?.(provider, rest.join("/"));
		if (found) return found;
	}
	return ctx.model;
}

/** In-flight aux calls, aborted at session_shutdown: a pending one would keep `pi -p` alive. */
const inflightAux = new Set<AbortController>();
// An aux call that ran out of time makes the next ones skip waiting for this long: a slow aux
// model costs the session one budget, not one per tool round.
const AUX_SLOW_SUSPEND_MS = 60000;
let auxSlowUntil = 0;

/** How long an aux call the agent waits for may take now; 0: do not run it. */
export function auxWaitMs(requested: number, roundDeadline: number, now = Date.now()): number {
	if (now < auxSlowUntil) return 0;
	return Math.max(0, Math.min(requested, roundDeadline - now));
}

async function runAux(ctx: any, cfg: BridgeConfig, aux: AuxRequest, timeoutMs = aux.timeout_ms): Promise<AuxOutcome> {
	const started = Date.now();
	const fail = (error: string): AuxOutcome => ({
		text: null,
		error,
		input_tokens: 0,
		output_tokens: 0,
		model: null,
		elapsed_ms: Date.now() - started,
	});
	const controller = new AbortController();
	inflightAux.add(controller);
	const timer = setTimeout(() => {
		auxSlowUntil = Date.now() + AUX_SLOW_SUSPEND_MS;
		controller.abort();
	}, timeoutMs);
	const outer: AbortSignal | undefined = ctx.signal;
	const onAbort = () => controller.abort();
	outer?.addEventListener?.("abort", onAbort);
	try {
		const model = await resolveAuxModel(ctx, cfg);
		if (!model) return fail("no model");
		const context = {
			systemPrompt: aux.system,
			messages: [{ role: "user", content: aux.prompt, timestamp: Date.now() }],
		};
		let message: any;
		if (typeof ctx.modelRegistry?.streamSimple === "function") {
			// pi 1.x: the registry resolves auth itself (OAuth included); no runtime import.
			const stream = ctx.modelRegistry.streamSimple(model, context, {
				reasoning: model.reasoning ? "low" : undefined,
				maxTokens: aux.max_tokens,
				signal: controller.signal,
			});
			message = await stream.result();
		} else {
			// pi 0.73: completeSimple from pi-ai, resolved through pi's own module aliases.
			const ai: any = await import("@mariozechner/pi-ai");
			const auth = (await ctx.modelRegistry?.getApiKeyAndHeaders?.(model)) ?? { ok: false };
			message = await ai.completeSimple(model, context, {
				apiKey: auth.ok ? auth.apiKey : undefined,
				headers: auth.ok ? auth.headers : undefined,
				reasoning: model.reasoning ? "low" : undefined,
				maxTokens: aux.max_tokens,
				signal: controller.signal,
			});
		}
		if (!message || message.stopReason === "error" || message.stopReason === "aborted") {
			return fail(String(message?.errorMessage ?? message?.stopReason ?? "no answer").slice(0, 300));
		}
		return {
			text: textOf(message.content),
			error: null,
			input_tokens: message.usage?.input ?? 0,
			output_tokens: message.usage?.output ?? 0,
			model: `${model.provider}/${model.id}`,
			elapsed_ms: Date.now() - started,
		};
	} catch (err) {
		return fail(String((err as Error)?.message ?? err).slice(0, 300));
	} finally {
		clearTimeout(timer);
		inflightAux.delete(controller);
		outer?.removeEventListener?.("abort", onAbort);
	}
}

// -- the extension ---------------------------------------------------------------------------

/** Results a RETAIN/DROP tag may hide. */
const META_TOOLS = ["read", "grep", "find", "ls", "find_capability"];
/** Tools another mechanism takes, any case, ctxwrap's own (a recall's answer is never hidden
 * again) and those that answer with the user's words: the daemon's `mechanisms._TAKEN_TOOLS`. */
const TAKEN_TOOLS = ["bash", "read", "grep", "find", "ls", "find_capability", "fetch", "write", "glob", "ctx_recall", "askuserquestion", "request_user_input"];

/** A result the daemon is given only to keep, so that masking may take it once old: a tool no
 * other mechanism takes (an edit's answer, a custom or MCP tool's). The daemon's
 * `mechanisms.keeps_result_of`. */
export function keepsResultOf(name: string): boolean {
	return name !== "" && !TAKEN_TOOLS.includes(name.toLowerCase());
}
/** At most this many results per tag request (the daemon accepts 64): bounds one aux prompt. */
const TAG_BATCH_MAX = 16;

export interface TagBatch {
	items: Json[];
	ctx: any; // of the latest result: runAux takes the model and abort signal from it
	done: Promise<void>; // settles when the batch's tag is answered (or given up)
	resolve: () => void;
}

export function newTagBatch(ctx: any): TagBatch {
	let resolve: () => void = () => {};
	const done = new Promise<void>((r) => (resolve = r));
	return { items: [], ctx, done, resolve };
}

/**
 * One tool round's tag batch: the read-like calls of the latest assistant message, and the
 * taggable results collected for them. The batch is due when the last of those calls ends;
 * calls of other tools (a slow bash) never hold it back.
 */
export class TagRound {
	private waiting = new Set<string>();
	private open: TagBatch | null = null;

	/** A new assistant message with these read-like calls; returns what the previous round
	 * still held (its calls never all ended), to send now. */
	start(ids: Iterable<string>): TagBatch | null {
		const left = this.take();
		this.waiting = new Set(ids);
		return left;
	}

	/** A taggable result of the round joins its batch (returned); null: not a call of this
	 * round (a nested call), to be tagged on its own. */
	add(id: string, item: Json, ctx: any): TagBatch | null {
		if (!this.waiting.has(id)) return null;
		this.open ??= newTagBatch(ctx);
		this.open.items.push(item);
		this.open.ctx = ctx;
		return this.open;
	}

	/** A call ended (with or without a result); the batch when it was the round's last call. */
	ended(id: string): TagBatch | null {
		if (!this.waiting.delete(id) || this.waiting.size > 0) return null;
		const due = this.open;
		this.open = null;
		return due;
	}

	/** Whatever is collected, at once (the next LLM call is starting); the round is over. */
	take(): TagBatch | null {
		const due = this.open;
		this.open = null;
		this.waiting = new Set();
		return due;
	}
}

/** Tag rounds whose pace decides the next wait (agents/_proxy/tag_wait.py: the same rule). */
const TAG_RECENT_ROUNDS = 3;
/**
 * Before the tagger's pace is known (the daemon knew none at registration): enough for a local
 * model, once per process for a slow one.
 */
export const TAG_FIRST_WAIT_MS = 250;

/**
 * How long a request may wait for its tail's RETAIN/DROP tags (issue 43): `tag_wait_ms` while
 * the tagger's recent rounds fit in it (a round still running past it counting as one that did
 * not), else nothing; before any round was measured, `TAG_FIRST_WAIT_MS` unless a round has run
 * longer than that already; the daemon's registration reply tells the pace of earlier sessions
 * (`known`). A tag that comes later is not lost: RETAIN in the tail, and a late
 * DROP becomes a history mask at the next cold boundary. The twin of the proxies' `TagWait`.
 */
export class TagPace {
	private recent: number[] = [];
	private running = new Map<number, number>();
	private next = 0;
	private readonly now: () => number;

	constructor(now: () => number = Date.now) {
		this.now = now;
	}

	/**
	 * The tagger's latest rounds in earlier sessions (ms, oldest first: the registration reply's
	 * `tag_pace_ms`), taken while nothing has been measured here; anything else ignored.
	 */
	known(pacesMs: unknown): void {
		if (!Array.isArray(pacesMs) || this.recent.length > 0) return;
		const ms = pacesMs.filter((v): v is number => typeof v === "number" && v > 0 && v < 1e9);
		this.recent = ms.slice(-TAG_RECENT_ROUNDS);
	}

	/** A tag round's aux call starts now; `end` with the token when it settled. */
	begin(): number {
		const token = this.next++;
		this.running.set(token, this.now());
		return token;
	}

	end(token: number): void {
		const started = this.running.get(token);
		if (started === undefined) return;
		this.running.delete(token);
		this.recent.push(this.now() - started);
		if (this.recent.length > TAG_RECENT_ROUNDS) this.recent.shift();
	}

	allowance(budgetMs: number): number {
		if (budgetMs <= 0) return 0;
		const now = this.now();
		const running = [...this.running.values()].map((t) => now - t);
		if (this.recent.length === 0) {
			const first = Math.min(budgetMs, TAG_FIRST_WAIT_MS);
			return running.some((r) => r > first) ? 0 : first;
		}
		const seen = [...this.recent, ...running.filter((r) => r > budgetMs)].slice(-TAG_RECENT_ROUNDS);
		return median(seen) > budgetMs ? 0 : budgetMs;
	}
}

function median(values: number[]): number {
	const s = [...values].sort((a, b) => a - b);
	const mid = s.length >> 1;
	return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}

const STATE_ENTRY = "ctxwrap-state";
const OWN_TOOLS = new Set(["ctx_recall", "find_capability"]);

/**
 * Whether the model can get a hidden output back through pi's own bash (`ctxwrap recall`), so
 * that ctx_recall need not ride in every request: bash is active and a `ctxwrap` executable is
 * on the PATH pi's bash inherits (`ctxwrap pi` puts it there). PI_CTX_RECALL=tool keeps the tool.
 */
export function shellRecall(active: string[], path: string = env.PATH ?? "", mode: string = env.PI_CTX_RECALL ?? ""): boolean {
	if (mode.toLowerCase() === "tool" || !active.includes("bash")) return false;
	return path.split(":").some((dir) => {
		if (!dir.startsWith("/")) return false; // a relative entry depends on bash's cwd
		try {
			const st = statSync(join(dir, "ctxwrap"));
			return st.isFile() && (st.mode & 0o111) !== 0;
		} catch {
			return false;
		}
	});
}

// How the daemon's digests and tombstones name the tool (state/session.py, `recall_call`).
const RECALL_MARK = "ctx_recall(handle=";

/**
 * Whether a session's history points the model at ctx_recall: it ran with the tool (an older
 * bridge, PI_CTX_RECALL=tool, no bash then), so its digests and tombstones say
 * `ctx_recall(handle=…)`, or the model called it. Such a session keeps the tool when resumed:
 * taken away, every hint in its history would name a tool that is gone.
 */
export function historyNamesRecallTool(entries: any[]): boolean {
	const named = (text: unknown) => typeof text === "string" && text.includes(RECALL_MARK);
	for (const e of entries) {
		if (e?.type === "custom" && e.customType === STATE_ENTRY) {
			for (const ed of e.data?.edits ?? []) if (named(ed?.text)) return true;
			continue;
		}
		const content = e?.type === "message" ? e.message?.content : undefined;
		if (named(content)) return true;
		if (!Array.isArray(content)) continue;
		for (const b of content) {
			if ((b?.type === "toolCall" && b.name === "ctx_recall") || named(b?.text)) return true;
		}
	}
	return false;
}

const FACT_TYPE = "ctxwm-fact";
const FACT_CONTENT_CHARS = 65536;

export default function ctxwrapBridge(pi: ExtensionAPI): void {
	try {
		install(pi as any);
	} catch (err) {
		// A bridge that cannot install must leave pi exactly as it was.
		try {
			process.stderr.write(`ctxwrap: bridge disabled: ${(err as Error)?.message ?? err}\n`);
		} catch {}
	}
}

function install(pi: any): void {
	let cfg = envConfig();
	if (cfg.off) return;
	const daemon = new Daemon();

	// Per-session state; replaced on every session_start (new, resume, fork, reload).
	let sessionId: string | null = null;
	let edits: Edit[] = [];
	let editIds = new Set<string>();
	let digests = new Map<string, number>(); // toolCallId → chars saved by the bash digest
	let seen = new Set<string>();
	let callIndex = 0;
	let firstKey: string | null = null;
	let cache: CacheState = { lastAt: null, model: null, tools: null };
	// The cache lifetime (s) the provider payloads ask for beyond the default (pi's
	// PI_CACHE_RETENTION=long): a pause inside it is no idle boundary. Known from the previous
	// payload (`before_provider_request`); before the first one of a process (a resume), the
	// shortest long lifetime pi asks any provider for (30 minutes).
	let askedTtlS: number | null = env.PI_CACHE_RETENTION === "long" ? 1800 : null;
	let skillsRemoved = 0;
	let toolsChars = 0;
	let ownToolsChars = 0; // ctx_recall + find_capability: plain pi sends neither
	// The model recalls through ctx_recall (true) or `ctxwrap recall` in bash (false): decided at
	// each session start, before the session's first request, so the tool list never changes
	// mid-session (a changed list rewrites the provider's whole cached prefix).
	let recallTool = true;
	let historyRecall = false; // this session's history names ctx_recall (`historyNamesRecallTool`)
	let capabilityOff = false; // find_capability left out: this session strips no skills
	let pendingTags = new Map<string, Promise<void>>();
	let pendingFacts = new Map<string, Promise<void>>(); // aux facts still running (not waited for)
	let lateFacts = new Map<string, string>(); // toolCallId → aux fact to steer after the next round
	// Batched tags: the read-like calls of the latest assistant message whose result has not
	// arrived yet, and the taggable results collected so far; one aux call tags the round.
	let tagRound = new TagRound();
	// The tagger's pace: how long a request waits for its tags (kept across sessions: it is the
	// aux model's).
	const tagPace = new TagPace();
	// Cost model (docs/accounting.md): last request's blocks as sent and as plain pi's, and
	// per-message sizes by identity, so each call measures only what is new or edited.
	let prevSentBlocks: Block[] = [];
	let prevPlainBlocks: Block[] = [];
	let blockChars = new Map<string, number>();
	let promptIndex = 0;
	let lastStart: Json | null = null;
	let catalogSignature = "";
	// Compaction timing (compact_like_plain): the daemon's latest session totals (the start's
	// and each turn_end's reply), and the plain compaction count a compaction was last asked for.
	let lastTotals: Json | null = null;
	let compactAskedAt = 0;

	let meter = new ContextMeter();
	const outbox = new StatsOutbox((path, body, deadline) => daemon.send<Json>(path, body, deadline));
	// One aux time budget per tool round (the tool calls between two LLM calls): the first aux
	// call the agent waits for starts it; digests and facts of the round share what is left.
	let auxRoundDeadline = 0;
	const auxBudget = (aux: AuxRequest): number => {
		if (!auxRoundDeadline) auxRoundDeadline = Date.now() + cfg.aux_timeout_ms;
		return auxWaitMs(aux.timeout_ms, auxRoundDeadline);
	};
	/** Runs an aux call within the round's budget and hands the answer to the daemon. */
	const finishAux = async (ctx: any, aux: AuxRequest): Promise<Json | null> => {
		const wait = auxBudget(aux);
		if (wait <= 0) return null; // no time left this round: the extract / heuristic stands
		const outcome = await runAux(ctx, cfg, aux, wait);
		return daemon.call<Json>("/v1/aux/result", { session_id: sessionId, aux_id: aux.aux_id, ...outcome }, cfg.bridge_timeout_ms);
	};

	const applyConfig = (c: Json | null | undefined) => {
		if (c && typeof c === "object") cfg = { ...cfg, ...(c as Partial<BridgeConfig>) };
	};

	const persist = (data: Json) => {
		try {
			pi.appendEntry(STATE_ENTRY, data);
		} catch {}
	};

	const restore = (ctx: any) => {
		edits = [];
		editIds = new Set();
		editsById.clear();
		digests = new Map();
		let entries: any[] = [];
		try {
			entries = ctx.sessionManager?.getBranch?.() ?? ctx.sessionManager?.getEntries?.() ?? [];
		} catch {}
		historyRecall = historyNamesRecallTool(entries);
		for (const e of entries) {
			if (e?.type !== "custom" || e.customType !== STATE_ENTRY || !e.data) continue;
			for (const raw of e.data.edits ?? []) {
				const ed = asEdit(raw);
				if (ed && !editIds.has(`${ed.kind}:${ed.toolCallId}`)) addEdit(ed);
			}
			for (const [id, saved] of Object.entries(e.data.digests ?? {})) digests.set(id, Number(saved) || 0);
		}
	};

	const toolSpecs = (): { specs: Json[]; activeChars: number; ownChars: number } => {
		let all: any[] = [];
		let active: string[] = [];
		try {
			all = pi.getAllTools?.() ?? [];
			active = pi.getActiveTools?.() ?? [];
		} catch {}
		const activeSet = new Set(active);
		let activeChars = 0;
		let ownChars = 0;
		const specs = all.map((t: any) => {
			const chars = (t.name?.length ?? 0) + (t.description?.length ?? 0) + JSON.stringify(t.parameters ?? {}).length;
			if (activeSet.has(t.name)) activeChars += chars; // our own tools cost too: count them
			if (activeSet.has(t.name) && OWN_TOOLS.has(t.name)) ownChars += chars;
			return {
				name: String(t.name),
				description: String(t.description ?? ""),
				parameters: Object.keys(t.parameters?.properties ?? {}),
				chars,
			};
		});
		// Our own tools are not capabilities to find.
		return { specs: specs.filter((t) => !OWN_TOOLS.has(t.name)), activeChars, ownChars };
	};

	/**
	 * find_capability finds what the skills strip took out of the prompt. A session whose first
	 * prompt had no skill to strip would carry it in every request for nothing (pi's inactive
	 * built-in tools are pi's choice, not ctxwrap's saving): it leaves before the first request,
	 * and later prompts keep any skill that appears in the prompt, as plain pi does. Returns
	 * whether the tool list changed.
	 */
	const setCapabilityTool = (on: boolean): boolean => {
		let changed = false;
		try {
			const active: string[] = pi.getActiveTools?.() ?? [];
			const has = active.includes("find_capability");
			if (has && !on) {
				pi.setActiveTools(active.filter((n) => n !== "find_capability"));
				changed = true;
			} else if (!has && on && (pi.getAllTools?.() ?? []).some((t: any) => t?.name === "find_capability")) {
				pi.setActiveTools([...active, "find_capability"]); // a resumed session that now has skills
				changed = true;
			}
			capabilityOff = !(pi.getActiveTools?.() ?? []).includes("find_capability");
		} catch {
			capabilityOff = true; // unknown: strip nothing the model could not find again
		}
		trace(`find_capability ${capabilityOff ? "off" : "on"}`);
		return changed;
	};

	/** ctx_recall on or off for this session (`shellRecall`); the daemon's notes follow it. */
	const chooseRecall = () => {
		let active: string[] = [];
		let registered = false;
		try {
			active = pi.getActiveTools?.() ?? [];
			registered = (pi.getAllTools?.() ?? []).some((t: any) => t?.name === "ctx_recall");
		} catch {}
		const has = active.includes("ctx_recall");
		const shell = shellRecall(active) && !historyRecall;
		try {
			if (shell && has) pi.setActiveTools(active.filter((n) => n !== "ctx_recall"));
			// a session resumed where bash is gone now: the tool comes back before its first request
			else if (!shell && !has && registered) pi.setActiveTools([...active, "ctx_recall"]);
			recallTool = !shell && (has || registered);
		} catch {
			recallTool = has;
		}
		trace(`recall through ${recallTool ? "ctx_recall" : "bash"}`);
	};

	// The wait for the daemon's answer to this session's start, owed by its first prompt.
	let startWait: Promise<void> | null = null;

	/**
	 * Register the session and return at once: pi 0.73's TUI drops a prompt submitted while
	 * session_start handlers run, so the wait (at most a decision's deadline) is left in
	 * `startWait` for before_agent_start, which pi holds the prompt for.
	 */
	const register = (ctx: any, reason: string) => {
		const sm = ctx.sessionManager;
		const { specs, activeChars, ownChars } = toolSpecs();
		toolsChars = activeChars;
		ownToolsChars = ownChars;
		const skills: Json[] = []; // pi shows skills only at before_agent_start; sent from there
		const pkg = piPackage();
		lastStart = {
			session_id: sessionId,
			session_file: sm?.getSessionFile?.() ?? null,
			cwd: sm?.getCwd?.() ?? ctx.cwd ?? process.cwd(),
			pid: process.pid,
			reason,
			pi_version: pkg.version,
			pi_package: pkg.name,
			model: modelRef(ctx.model),
			tools: specs,
			skills,
			active_tools: pi.getActiveTools?.() ?? [],
			recall_tool: recallTool,
			compaction: compactionSettings(sm?.getCwd?.() ?? ctx.cwd ?? process.cwd(), modelRef(ctx.model)),
		};
		noteSessionForExit();
		// The first prompt waits for this at most a decision's deadline from now; a slow daemon
		// (starting, busy) still gets the call, which stays in flight: a second start would only
		// race it.
		const pending = registerNow();
		startWait = (async () => {
			let waitedOut = false;
			const reply = await Promise.race([
				pending,
				new Promise<null>((r) =>
					setTimeout(() => {
						waitedOut = true;
						r(null);
					}, cfg.bridge_timeout_ms).unref?.(),
				),
			]);
			if (reply) {
				updateStatus(ctx, reply.totals);
				if (reply.totals) lastTotals = reply.totals;
			} else {
				// A daemon that took the call but did not answer within a decision's deadline is hung
				// or busy: suspend like any deadline, so each later hook does not wait out its own
				// (invariant 1). The registration stays in flight; its answer lifts the suspension.
				if (waitedOut) daemon.suspend();
				void pending.then((late) => {
					if (late) {
						daemon.unsuspend();
						updateStatus(ctx, late.totals);
					} else if (daemon.gone) registerWhenReady();
				});
			}
		})().catch(() => {});
	};

	/**
	 * `ctxwrap pi` prints one line when pi exits (savings, how to resume through ctxwrap): it
	 * learns which session that was from this small file (CTXWRAP_EXIT_NOTE), rewritten at every
	 * session start (new, resume, fork). Never fails pi.
	 */
	const noteSessionForExit = () => {
		const file = env.CTXWRAP_EXIT_NOTE;
		if (!file || !lastStart) return;
		try {
			writeFileSync(file, JSON.stringify({ session_id: lastStart.session_id, session_file: lastStart.session_file }), { mode: 0o600 });
		} catch {}
	};

	/**
	 * Registration, one at a time: the start of a session, the daemon becoming ready, a 409 and a
	 * restarted daemon all share the call in flight, so a session is registered once (two starts
	 * in flight used to log `session_start` twice, and the later one, sent before pi showed its
	 * skills, wiped the catalog the earlier call had delivered). `lastStart` carries the latest
	 * catalog, so any registration restores it. Resolves to the daemon's reply (null: none).
	 */
	let registration: Promise<Json | null> | null = null;
	let registered = false; // the daemon took this session's start
	let catalogKnown = false; // pi showed its skills (before_agent_start) and lastStart has them
	let catalogDelivered = false; // ... and the daemon has that catalog
	let registeredWaiters: (() => void)[] = [];
	const markRegistered = (withCatalog: boolean) => {
		registered = true;
		if (withCatalog) catalogDelivered = true;
		const waiters = registeredWaiters;
		registeredWaiters = [];
		for (const w of waiters) w();
	};
	const registerNow = (deadlineMs = REGISTER_DEADLINE_MS): Promise<Json | null> => {
		registration ??= (async () => {
			if (!lastStart) return null;
			const sid = sessionId;
			const withCatalog = catalogKnown;
			const reply = await daemon.call<Json>("/v1/sessions/start", lastStart, deadlineMs);
			if (reply && sid === sessionId) {
				applyConfig(reply.config);
				tagPace.known(reply.tag_pace_ms); // the tagger's pace in earlier sessions
				markRegistered(withCatalog);
				// pi showed its skills while this call was on its way: send them now.
				if (catalogKnown && !catalogDelivered) void sendCatalog(3000);
			}
			return reply;
		})().finally(() => {
			registration = null;
		});
		return registration;
	};

	/**
	 * Resolves true once the daemon has this session and its catalog, within `waitMs`: a
	 * capability search must not reach a daemon that would answer from an empty catalog.
	 */
	const whenCatalogReady = async (waitMs: number): Promise<boolean> => {
		const until = Date.now() + waitMs;
		if (!registered) {
			if (!registration && !waitingForDaemon) registerWhenReady();
			await new Promise<void>((resolve) => {
				const timer = setTimeout(resolve, Math.max(0, until - Date.now()));
				registeredWaiters.push(() => {
					clearTimeout(timer);
					resolve();
				});
			});
			if (!registered) return false;
		}
		if (!catalogDelivered && catalogKnown) await sendCatalog(Math.max(1, until - Date.now()));
		return catalogDelivered || !catalogKnown;
	};

	/** The catalog to the daemon (awaited by find_capability); a lost one is sent again. */
	let catalogSending: Promise<boolean> | null = null;
	const sendCatalog = (deadlineMs: number): Promise<boolean> => {
		catalogSending ??= (async () => {
			const sid = sessionId;
			const body = { session_id: sid, tools: lastStart?.tools ?? [], skills: lastStart?.skills ?? [] };
			const reply = await daemon.call<Json>("/v1/catalog", body, deadlineMs, false);
			if (reply && sid === sessionId) catalogDelivered = true;
			return reply !== null;
		})().finally(() => {
			catalogSending = null;
		});
		return catalogSending;
	};

	/**
	 * The daemon is still starting (`ctxwrap pi` does not wait for it): register as soon as it
	 * answers, in the background, so pi never waits and the session still gets its savings
	 * from the first tool round on. Unref'd timers: this never keeps `pi -p` alive.
	 */
	let waitingForDaemon = false;
	const registerWhenReady = () => {
		if (waitingForDaemon) return;
		waitingForDaemon = true;
		const sid = sessionId;
		void (async () => {
			const until = Date.now() + 20000;
			while (Date.now() < until && sid === sessionId && lastStart && !registered) {
				await new Promise((r) => setTimeout(r, 100).unref?.());
				if (registered) break; // a 409 on another call registered it meanwhile
				const health = await daemon.get<Json>("/v1/health", 300);
				if (health?.protocol !== PROTOCOL) continue;
				if (await registerNow()) {
					trace("registered once the daemon was ready");
					break;
				}
			}
			waitingForDaemon = false;
		})().catch(() => {
			waitingForDaemon = false;
		});
	};

	// After a daemon restart the new instance does not know this session: tell it again.
	daemon.onInstanceChange = () => {
		if (!lastStart) return;
		registered = false;
		catalogDelivered = false;
		void registerNow();
	};
	// A daemon that never registered this session (our session_start got lost, or is still on
	// its way) answers 409: wait for the registration in flight, or make one.
	daemon.onUnknownSession = async () => {
		if (!lastStart) return false;
		return (await registerNow()) !== null;
	};

	const updateStatus = (ctx: any, totals: Json | null | undefined) => {
		if (!cfg.stats_widget || !totals || !ctx?.hasUI) return;
		try {
			ctx.ui?.setStatus?.("ctxwrap", statusText(totals));
		} catch {}
	};

	pi.on("session_start", async (event: any, ctx: any) => {
		try {
			sessionId = ctx.sessionManager?.getSessionId?.() ?? null;
			if (!sessionId) return;
			restore(ctx);
			seen = new Set();
			callIndex = 0;
			firstKey = null;
			cache = { lastAt: null, model: null, tools: null };
			meter = new ContextMeter();
			prevSentBlocks = [];
			prevPlainBlocks = [];
			blockChars = new Map();
			promptIndex = 0;
			pendingTags = new Map();
			pendingFacts = new Map();
			lateFacts = new Map();
			tagRound = new TagRound();
			catalogSignature = "";
			registered = false;
			catalogKnown = false;
			catalogDelivered = false;
			lastTotals = null;
			compactAskedAt = 0;
			capabilityOff = false;
			chooseRecall();
			register(ctx, String(event?.reason ?? "startup"));
			if (!ctx?.hasUI) await compactBeforePrintRun(ctx);
			else void compactOnResume(ctx);
		} catch {}
	});

	pi.on("session_shutdown", async (event: any) => {
		trace("session_shutdown");
		try {
			// Pending tags are for a context that will not be built again: abort, don't wait.
			for (const c of inflightAux) c.abort();
			if (sessionId) await shutdownWithStats(String(event?.reason ?? "quit"));
		} catch {}
		outbox.close();
		daemon.close(); // destroy, not end(): a half-open socket keeps `pi -p` from exiting
	});

	/**
	 * Deliver the queued statistics, then end the session telling the daemon how many records it
	 * will never get. A daemon that answered lately but is away now (killed, restarting) is
	 * waited for, briefly; one that never answered costs nothing (fail open: pi exits as plain pi).
	 */
	const shutdownWithStats = async (reason: string) => {
		const until = Date.now() + (Date.now() - daemon.lastAnswerAt < 15000 ? STATS_SHUTDOWN_WAIT_MS : 0);
		while (outbox.pending) {
			await outbox.flush(1000);
			if (outbox.pending && (Date.now() >= until || !(await daemon.revive(until - Date.now())))) break;
		}
		for (;;) {
			const body = { session_id: sessionId, reason, undelivered: outbox.lost + outbox.pending };
			const answer = await daemon.send("/v1/sessions/shutdown", body, 500);
			if (answer.status > 0 && answer.status < 500) return;
			if (Date.now() >= until || !(await daemon.revive(until - Date.now()))) return;
		}
	};

	pi.on("model_select", (event: any, ctx: any) => {
		try {
			const m = modelRef(event?.model);
			const cwd = ctx?.sessionManager?.getCwd?.() ?? ctx?.cwd ?? process.cwd();
			if (sessionId && m) daemon.notify("/v1/sessions/model", { session_id: sessionId, model: m, compaction: compactionSettings(cwd, m) });
		} catch {}
	});

	// pi's own resolved settings, where it shows them: they replace the files' reading.
	let summarizedChars: number | null = null;
	// ctxwrap asked pi for this compaction (compact_like_plain): not the user's own /compact,
	// so the cost model's plain session does not compact with it (it already had)
	let compactAsked = false;
	pi.on("session_before_compact", (event: any, ctx: any) => {
		try {
			const prep = event?.preparation ?? {};
			let n = typeof prep.previousSummary === "string" ? prep.previousSummary.length : 0;
			for (const m of [...(prep.messagesToSummarize ?? []), ...(prep.turnPrefixMessages ?? [])]) n += summaryChars(m?.role, messageChars(m ?? {}));
			summarizedChars = n;
			const st = prep.settings;
			const m = modelRef(ctx?.model);
			const int = (v: unknown, d: number) => (Number.isSafeInteger(v) && (v as number) >= 0 ? (v as number) : d);
			if (sessionId && m && st && typeof st === "object") {
				const compaction = { enabled: st.enabled !== false, reserve_tokens: int(st.reserveTokens, 16384), keep_recent_tokens: int(st.keepRecentTokens, 20000) };
				daemon.notify("/v1/sessions/model", { session_id: sessionId, model: m, compaction });
			}
		} catch {}
		return undefined;
	});

	// Awaited, with a short deadline: pi 0.73 compacts after the last run of `pi -p` and exits
	// right after, which would drop a fire-and-forget report.
	pi.on("session_compact", async (event: any) => {
		try {
			const e = event?.compactionEntry ?? {};
			if (!sessionId) return;
			const body = {
				session_id: sessionId,
				reason: String(event?.reason ?? "threshold").slice(0, 40),
				tokens_before: Number.isSafeInteger(e.tokensBefore) && e.tokensBefore >= 0 ? e.tokensBefore : 0,
				summary_chars: typeof e.summary === "string" ? e.summary.length : 0,
				summarized_chars: summarizedChars,
				from_extension: !!event?.fromExtension || compactAsked,
			};
			summarizedChars = null;
			compactAsked = false;
			await daemon.call("/v1/compaction", body, 1000);
		} catch {}
	});

	pi.on("before_agent_start", async (event: any, ctx: any) => {
		try {
			if (!sessionId) return;
			if (startWait) {
				// The first prompt of the session: its start's answer (or deadline) first, so
				// this prompt is decided with the daemon's config, as every later one is.
				const wait = startWait;
				await wait;
				if (startWait === wait) startWait = null;
			}
			promptIndex++;
			// Read the catalog before stripping: pi exposes skills only here.
			const { specs, activeChars, ownChars } = toolSpecs();
			toolsChars = activeChars;
			ownToolsChars = ownChars;
			const skills = (event?.systemPromptOptions?.skills ?? []).map((s: any) => ({
				name: String(s.name),
				description: String(s.description ?? ""),
				file_path: String(s.filePath),
				base_dir: String(s.baseDir ?? ""),
				disable_model_invocation: !!s.disableModelInvocation,
			}));
			const signature = JSON.stringify([specs.map((t) => t.name), skills.map((s: Json) => s.file_path)]);
			if (lastStart && lastStart.session_id === sessionId) {
				// Any later registration carries the catalog: it can never wipe what this sends.
				lastStart = { ...lastStart, tools: specs, skills };
				catalogKnown = true;
			}
			if (signature !== catalogSignature) {
				catalogSignature = signature;
				catalogDelivered = false;
				// Not before the session is registered: a 409 there would register it a second time.
				if (registered) {
					void sendCatalog(3000).then((ok) => {
						if (!ok) catalogSignature = ""; // lost: the next prompt sends it again
					});
				}
			}

			let result: Json | undefined;
			skillsRemoved = 0;
			const prompt = String(event?.systemPrompt ?? "");
			if (promptIndex === 1) {
				// before the session's first request: the tool list is settled here, once
				const hasSkills = cfg.lazy_skills && cfg.lazy && stripSkills(prompt).removed > 0;
				if (setCapabilityTool(hasSkills)) {
					const after = toolSpecs();
					toolsChars = after.activeChars;
					ownToolsChars = after.ownChars;
				}
			}
			if (cfg.lazy_skills && cfg.lazy && !capabilityOff) {
				const stripped = stripSkills(prompt);
				skillsRemoved = stripped.removed;
				const opts = event?.systemPromptOptions;
				if (stripped.removed > 0) {
					if (opts && "sections" in opts && Array.isArray(opts.skills)) {
						// pi 1.x: edit the structured options; pi records it and keeps its deltas.
						opts.skills.length = 0;
					} else {
						// pi 0.73: the prompt is rebuilt from scratch each run, so the same
						// deterministic strip yields byte-identical text every prompt.
						result = { systemPrompt: stripped.prompt };
					}
				}
			}
			daemon.notify("/v1/prompt", {
				session_id: sessionId,
				prompt: String(event?.prompt ?? ""),
				system_prompt_chars: prompt.length - skillsRemoved,
				skills_block_chars: skillsRemoved,
			});
			return result;
		} catch {
			return undefined;
		}
	});

	// When each bash call started: the daemon trusts a spill file only if pi wrote it during
	// this call (a path named in the output itself is data, not an instruction).
	const bashStarted = new Map<string, number>();
	pi.on("tool_call", (event: any) => {
		try {
			if (event?.toolName !== "bash") return undefined;
			if (bashStarted.size > 256) bashStarted.clear(); // results that never came back
			bashStarted.set(String(event.toolCallId), Date.now());
		} catch {}
		return undefined;
	});

	// The read-like calls of each assistant message: their results are tagged in one batch.
	pi.on("message_end", (event: any) => {
		try {
			const m = event?.message;
			if (m?.role !== "assistant" || !Array.isArray(m.content)) return undefined;
			const calls = m.content.filter((b: any) => b?.type === "toolCall" && META_TOOLS.includes(String(b.name)));
			const left = tagRound.start(calls.map((b: any) => String(b.id)));
			if (left) flushTags(left); // a round whose calls never all ended: send what it has
		} catch {}
		return undefined;
	});
	// A call that never executes (blocked, invalid arguments) has no tool_result but still ends.
	pi.on("tool_execution_end", (event: any) => {
		try {
			if (!event?.parentToolCallId) tagArrived(String(event?.toolCallId));
		} catch {}
		return undefined;
	});

	pi.on("tool_result", async (event: any, ctx: any) => {
		try {
			if (!sessionId) return;
			deliverLateFacts();
			const name = String(event?.toolName ?? "");
			if (name === "bash" && cfg.bash) return await onBash(event, ctx);
			if (META_TOOLS.includes(name)) {
				if (cfg.amnesia) onMeta(event, ctx);
				tagArrived(String(event.toolCallId));
				return undefined;
			}
			if (name === "write" && cfg.write) return await onWrite(event, ctx);
			if (keepsResultOf(name)) onOther(event, name);
		} catch {}
		return undefined;
	});

	const onOther = (event: any, name: string) => {
		const text = textOf(event.content);
		if (!cfg.mask || event.isError || text.length < cfg.mask_min_chars || !sessionId) return;
		// off the tool's path: the daemon stores it behind a recall handle (Masking.keeps_for_recall)
		const result = { session_id: sessionId, tool_call_id: String(event.toolCallId), tool_name: name, input: {}, text, is_error: false };
		void daemon.send<Json>("/v1/tool_result", result, cfg.bridge_timeout_ms);
	};

	const onBash = async (event: any, ctx: any) => {
		const started = bashStarted.get(String(event.toolCallId));
		bashStarted.delete(String(event.toolCallId));
		const text = textOf(event.content);
		const result = {
			session_id: sessionId,
			tool_call_id: String(event.toolCallId),
			tool_name: "bash",
			input: event.input ?? {},
			text,
			is_error: !!event.isError,
		};
		if (tokens(text.length) < cfg.bash_min_tokens) {
			// Too short to digest, long enough for masking to take once old: stored behind a
			// recall handle by the daemon, off the tool's path (Masking.keeps_for_recall)
			if (cfg.mask && !event.isError && text.length >= cfg.mask_min_chars && sessionId) {
				void daemon.send<Json>("/v1/tool_result", result, cfg.bridge_timeout_ms);
			}
			return undefined;
		}
		const details = (event.details && typeof event.details === "object" ? event.details : {}) as Json;
		const reply = await daemon.callOrRevive<Json>(
			"/v1/tool_result",
			{
				...result,
				full_output_path: typeof details.fullOutputPath === "string" ? details.fullOutputPath : null,
				pi_tmpdir: piTmpdir(),
				call_started_ms: started ?? null,
			},
			// Once per large output, right after a command the user already waited for: a loaded
			// machine must not turn a digest into a raw tail.
			Math.max(cfg.bridge_timeout_ms, 15000),
			5000, // a killed daemon is restarted by us; worth a short wait to avoid a raw tail
		);
		// The daemon may decide to pass (bash digests off, a higher threshold after a config
		// reload): only *no answer* falls back to the bridge's own tail.
		if (reply?.action === "pass") return undefined;
		let out: string;
		if (reply && reply.action === "replace" && typeof reply.text === "string") {
			out = reply.text;
			if (reply.aux) {
				const fin = await finishAux(ctx, reply.aux as AuxRequest);
				if (fin?.accepted && typeof fin.text === "string") out = fin.text;
			}
		} else {
			out = fallbackTail(text, cfg.bash_fallback_bytes);
		}
		const saved = text.length - out.length;
		digests.set(String(event.toolCallId), saved);
		persist({ digests: { [String(event.toolCallId)]: saved } });
		const { truncation: _t, fullOutputPath: _p, ...rest } = details;
		return { content: [{ type: "text", text: out }], details: rest };
	};

	const onMeta = (event: any, ctx: any) => {
		const text = textOf(event.content);
		if (event.isError || tokens(text.length) < cfg.amnesia_min_tokens) return undefined;
		const id = String(event.toolCallId);
		const item: Json = { tool_call_id: id, tool_name: String(event.toolName), input: event.input ?? {}, text };
		// Tagging is out of band: tool_result returns at once, the tag runs beside the tool round.
		const batch = tagRound.add(id, item, ctx);
		if (batch) {
			pendingTags.set(id, batch.done);
			return undefined;
		}
		// Not a call of the round we know (a nested call): tagged on its own, at once.
		const single = newTagBatch(ctx);
		single.items.push(item);
		pendingTags.set(id, single.done);
		flushTags(single);
		return undefined;
	};

	/** A call of the round has its result (or ended without one): the last one sends the batch. */
	const tagArrived = (id: string) => {
		const due = tagRound.ended(id);
		if (due) flushTags(due);
	};

	/** One /v1/tag_batch per batch (chunks of TAG_BATCH_MAX), each answered by one aux call. */
	const flushTags = (batch: TagBatch) => {
		// A result the model has seen can only be masked later: not worth a tag without masking.
		const items = cfg.mask ? batch.items : batch.items.filter((it) => !seen.has(String(it.tool_call_id)));
		const chunks: Json[][] = [];
		for (let i = 0; i < items.length; i += TAG_BATCH_MAX) chunks.push(items.slice(i, i + TAG_BATCH_MAX));
		const runChunk = async (results: Json[]) => {
			const reply = await daemon.call<Json>("/v1/tag_batch", { session_id: sessionId, results }, cfg.bridge_timeout_ms);
			if (reply?.aux) {
				const pace = tagPace.begin();
				let outcome: AuxOutcome;
				try {
					outcome = await runAux(batch.ctx, cfg, reply.aux as AuxRequest);
				} finally {
					tagPace.end(pace);
				}
				await daemon.call("/v1/aux/result", { session_id: sessionId, aux_id: reply.aux.aux_id, ...outcome }, cfg.bridge_timeout_ms);
			}
		};
		Promise.allSettled(chunks.map((c) => runChunk(c).catch(() => {}))).then(
			() => batch.resolve(),
			() => batch.resolve(),
		);
	};

	const onWrite = async (event: any, ctx: any) => {
		const input = event.input ?? {};
		if (event.isError || typeof input.content !== "string") return undefined;
		const bytes = Buffer.byteLength(input.content, "utf8");
		if (bytes < cfg.write_min_bytes) return undefined;
		// The fact needs the head of the file and its size, not a 50 MB body on the socket.
		const content = input.content.length > FACT_CONTENT_CHARS ? input.content.slice(0, FACT_CONTENT_CHARS) : input.content;
		let lines = 0;
		for (let i = input.content.indexOf("\n"); i !== -1; i = input.content.indexOf("\n", i + 1)) lines++;
		if (input.content.length && !input.content.endsWith("\n")) lines++;
		const reply = await daemon.call<Json>(
			"/v1/tool_result",
			{
				session_id: sessionId,
				tool_call_id: String(event.toolCallId),
				tool_name: "write",
				input: { ...input, content },
				text: textOf(event.content),
				is_error: false,
				content_bytes: bytes,
				content_lines: lines,
			},
			cfg.bridge_timeout_ms,
		);
		const fact: string | null = typeof reply?.text === "string" ? reply.text : null;
		if (fact) steerFact(fact);
		if (reply?.aux) {
			// The heuristic fact went out at once; the aux fact is not waited for (an aux round
			// trip per write was most of ctxwrap's latency). It follows a round later, if better.
			const aux = reply.aux as AuxRequest;
			const id = String(event.toolCallId);
			const job = (async () => {
				if (Date.now() < auxSlowUntil) return;
				const outcome = await runAux(ctx, cfg, aux, aux.timeout_ms);
				const fin = await daemon.call<Json>("/v1/aux/result", { session_id: sessionId, aux_id: aux.aux_id, ...outcome }, cfg.bridge_timeout_ms);
				if (fin?.accepted && typeof fin.text === "string" && fin.text !== fact) lateFacts.set(id, fin.text);
			})().catch(() => {});
			pendingFacts.set(id, job);
			void job.finally(() => pendingFacts.delete(id));
		}
		return undefined;
	};

	/** Steered: lands right after this tool round, before the next LLM call, and is persisted as
	 * a custom message, so /resume keeps it. */
	const steerFact = (fact: string) => {
		try {
			pi.sendMessage({ customType: FACT_TYPE, content: fact, display: false }, { deliverAs: "steer" });
		} catch {}
	};

	/** Aux facts that came in after their round: they follow the next tool round. */
	const deliverLateFacts = () => {
		if (!lateFacts.size) return;
		for (const fact of lateFacts.values()) steerFact(fact);
		lateFacts.clear();
	};

	/** Chars of one message, cached: a sent message never changes (edits are frozen). */
	/** What this request sends and what plain pi would have sent on top, per mechanism. */
	const measure = (raw: any[], ctx: any) => {
		const m = meter.measure(raw, editsById, digests);
		let system = m.system;
		if (system === 0) {
			try {
				system = String(ctx.getSystemPrompt?.() ?? "").length; // 0.73: the prompt is not in the list
			} catch {}
		}
		const saved = {
			bash: m.bash,
			amnesia: m.amnesia,
			masking: m.masking,
			writes: m.writes,
			skills: skillsRemoved,
			tools: -ownToolsChars,
		};
		return { sent: { system, messages: m.messages, tools: toolsChars }, saved };
	};

	/**
	 * This request as blocks (tools, system, then each message in wire order) as sent and as
	 * plain pi would have sent it, and the chars each shares with the previous request: what
	 * a prefix cache can read. A message's identity is its key plus the edits applied to it,
	 * so sizes are measured once per message (or once more when an edit reaches it).
	 */
	const costBlocks = (raw: any[], ctx: any, systemChars: number): Json => {
		const sentBlocks: Block[] = [["tools:" + toolsChars, toolsChars]];
		const plainBlocks: Block[] = [["tools:" + (toolsChars - ownToolsChars), toolsChars - ownToolsChars]];
		// The system prompt as one block, sized as `measure` sizes it (pi 1.x puts it in the
		// list in a shape of its own; 0.73 keeps it out of the list).
		let systemId = "";
		for (const m of raw) if (m?.role === "system") systemId += JSON.stringify(m);
		if (!systemId) {
			try {
				systemId = String(ctx.getSystemPrompt?.() ?? "");
			} catch {}
		}
		sentBlocks.push([fnv(systemId), systemChars]);
		plainBlocks.push([fnv(systemId) + ":" + skillsRemoved, systemChars + skillsRemoved]); // plain pi keeps its skills block
		let plainSummary = 0;
		for (let i = 0; i < raw.length; i++) {
			const m = raw[i];
			if (!m || m.role === "system") continue;
			const key = keyOf(m, i);
			const ids =
				m.role === "toolResult"
					? [String(m.toolCallId)]
					: m.role === "assistant" && Array.isArray(m.content)
						? m.content.filter((b: any) => b?.type === "toolCall").map((b: any) => String(b.id))
						: [];
			const eds = ids.flatMap((id: string) => editsById.get(id) ?? []);
			let raw_n = blockChars.get(key);
			if (raw_n === undefined) blockChars.set(key, (raw_n = messageChars(m)));
			let sent_n = raw_n;
			const sentKey = eds.length ? key + "|" + eds.map((e) => `${e.kind}:${e.toolCallId}:${(e as any).text?.length ?? 0}`).join(",") : key;
			if (eds.length) {
				let n = blockChars.get(sentKey);
				if (n === undefined) {
					const after = applyEdits([m], eds);
					blockChars.set(sentKey, (n = after.length ? messageChars(after[0] as Json) : -1));
				}
				sent_n = n;
			}
			if (sent_n >= 0) sentBlocks.push([sentKey, sent_n]);
			if (m.role === "custom" && m.customType === FACT_TYPE) continue; // plain pi has no facts
			const digest = m.role === "toolResult" ? (digests.get(String(m.toolCallId)) ?? 0) : 0;
			plainBlocks.push([key, raw_n + digest]);
			plainSummary += summaryChars(m.role, raw_n + digest);
		}
		const out = {
			sent_prefix_chars: prefixChars(prevSentBlocks, sentBlocks),
			plain_prefix_chars: prefixChars(prevPlainBlocks, plainBlocks),
			plain_summary_chars: plainSummary,
		};
		prevSentBlocks = sentBlocks;
		prevPlainBlocks = plainBlocks;
		return out;
	};

	/** The edit step, shared by `context` (0.73) and `context_with_system` (1.x). */
	const onContext = async (messages: any[], ctx: any): Promise<any[] | undefined> => {
		if (!sessionId || !Array.isArray(messages)) return undefined;
		if (callIndex === 0) {
			// First request of this process: any history in the list (resume, reload, fork) was
			// already seen by the model, so none of it may count as tail.
			for (const id of allToolCallIds(messages)) seen.add(id);
		}
		const head = messages.find((m) => m?.role !== "system");
		const headKey = head ? keyOf(head, 0) : "";
		const headChanged = firstKey !== null && headKey !== firstKey;
		firstKey = headKey;

		const tail: Tail = describeTail(messages, seen);
		const inTail = new Set(tailIds(tail));
		const now = cacheNow(ctx);
		// First request of this process: every assistant message in the list is from before (a resume).
		const prevAt = callIndex === 0 ? lastRequestAt(messages, messages.length) : cache.lastAt;
		const gapS = prevAt !== null ? (now.at - prevAt) / 1000 : null;
		const ttlS = Math.max(cfg.cache_ttl_s, askedTtlS ?? 0);
		const cold = cfg.mask ? coldReason(cache, now, prevAt, headChanged, ttlS * 1000) : null;
		const maskReason = cold ?? (cfg.mask && cfg.mask_warm && callIndex > 0 ? "warm" : null);
		cache = { lastAt: now.at, model: now.model, tools: now.tools };
		if (maskReason) trace(`context #${callIndex}: cache ${maskReason} (gap ${gapS} s)`);
		// Only a tagged result, a large write or a cold boundary can get an edit; anything else
		// (a bash round, a prompt) needs no daemon round trip before the request goes out.
		const editable =
			maskReason !== null ||
			[...inTail].some((id) => pendingTags.has(id)) ||
			(cfg.write &&
				tail.messages.some((m) =>
					(m.toolCalls ?? []).some((c) => c.name === "write" && (c.writeContentBytes ?? 0) >= cfg.write_min_bytes),
				));
		const unsent = tagRound.take(); // a round whose last call never reported: tag it now
		if (unsent) flushTags(unsent);
		if (tail.messages.length > 0 && editable) {
			const waits = [...inTail].map((id) => pendingTags.get(id)).filter((p): p is Promise<void> => !!p);
			// A request waits for its tags only while the tagger answers within tag_wait_ms
			// (TagPace): tags still running after the allowance count as RETAIN (invariant 4),
			// and a late DROP becomes a history mask at the next cold boundary (issue 43).
			const allowance = waits.length ? tagPace.allowance(cfg.tag_wait_ms) : 0;
			if (allowance > 0) {
				// The grace timer is cleared when the tags finish first: left running it kept
				// `pi -p` alive for the rest of the wait after its last request.
				let grace: ReturnType<typeof setTimeout> | undefined;
				await Promise.race([
					Promise.allSettled(waits),
					new Promise((r) => {
						grace = setTimeout(r, allowance);
					}),
				]);
				clearTimeout(grace);
			}
			const edited = resultEdited();
			// What a later thinking block has in its prefix stays as sent on a model that checks it
			// (an edit there gets the request refused, or the model's reasoning dropped).
			const keep = checksThinkingPrefix(ctx?.model?.id) ? boundByThinking(messages) : new Set<string>();
			const mask = maskReason ? maskRequest(messages, maskReason, edited, gapS) : undefined;
			const reply = await daemon.call<Json>(
				"/v1/context",
				{ session_id: sessionId, call_index: callIndex, message_count: messages.length, head_changed: headChanged, tail, mask, keep: [...keep] },
				cfg.bridge_timeout_ms,
			);
			const answered: Edit[] = [];
			for (const raw of reply?.edits ?? []) {
				const ed = asEdit(raw);
				if (ed && !keep.has(ed.toolCallId)) answered.push(ed); // checked, not trusted
			}
			// Masks rewrite seen history: only when this request was cold (we said so), and only
			// results we verify ourselves (seen, paired, no error, not edited yet).
			const maskOk = mask ? acceptableMasks(messages, answered.filter((e) => e.kind === "mask"), seen, edited) : new Set<string>();
			const fresh: Edit[] = [];
			for (const ed of answered) {
				const key = `${ed.kind}:${ed.toolCallId}`;
				if (editIds.has(key)) continue;
				if (ed.kind === "mask") {
					if (!maskOk.has(ed.toolCallId)) continue;
					maskOk.delete(ed.toolCallId);
				} else if (!inTail.has(ed.toolCallId)) continue; // tail edits: the unseen tail only (invariant 3)
				addEdit(ed);
				fresh.push(ed);
			}
			if (fresh.length) persist({ edits: fresh });
			// Old messages changed: the running size totals start over from this list.
			if (fresh.some((e) => e.kind === "mask")) meter = new ContextMeter();
		}
		for (const id of inTail) seen.add(id);
		for (const id of inTail) pendingTags.delete(id);
		const sent = edits.length ? applyEdits(messages, edits) : messages;
		const { sent: sentChars, saved } = measure(messages, ctx);
		auxRoundDeadline = 0; // the next tool round gets a fresh aux budget
		let prefixes: Json = {};
		try {
			prefixes = costBlocks(messages, ctx, sentChars.system);
		} catch {}
		const m = modelRef(ctx?.model);
		outbox.push("/v1/llm_call", {
			session_id: sessionId,
			call_index: callIndex,
			message_count: sent.length,
			head_changed: headChanged,
			sent_chars: sentChars,
			saved_chars: saved,
			...prefixes,
			prompt_index: Math.max(0, promptIndex - 1),
			model: m ? `${m.provider}/${m.id}` : null,
			cache_ttl_s: askedTtlS, // priced with it (docs/accounting.md)
		});
		callIndex++;
		return edits.length ? sent : undefined; // unchanged list: pi keeps its own bytes
	};

	/** What the cache-state check compares: now, the model and the active tool set. */
	const cacheNow = (ctx: any) => {
		let tools: string | null = null;
		try {
			tools = JSON.stringify(pi.getActiveTools?.() ?? null);
		} catch {}
		const m = modelRef(ctx?.model);
		return { at: Date.now(), model: m ? `${m.provider}/${m.id}` : null, tools };
	};

	/** Result ids with a tombstone, removal or mask: their first edit stays forever. */
	const resultEdited = (): Set<string> => {
		const ids = new Set<string>();
		for (const [id, list] of editsById) {
			if (list.some((e) => e.kind !== "strip_write" && e.kind !== "strip_edit")) ids.add(id);
		}
		return ids;
	};

	/** The whole history described (no bodies), sent once per cold boundary. */
	const maskRequest = (messages: any[], reason: string, edited: Set<string>, gapS: number | null) => {
		return {
			reason,
			gap_s: gapS,
			history: describeTail(messages, new Set()),
			paths: callPaths(messages),
			edited: [...edited],
			calls: callIndex,
		};
	};

	const editsById = new Map<string, Edit[]>();
	const addEdit = (ed: Edit) => {
		edits.push(ed);
		editIds.add(`${ed.kind}:${ed.toolCallId}`);
		const list = editsById.get(ed.toolCallId) ?? [];
		list.push(ed);
		editsById.set(ed.toolCallId, list);
	};

	// pi 1.x has context_with_system, which keeps mid-conversation prompt/tool patches in
	// place; editing through plain `context` there would fold them into a new head (a cache
	// miss). Both hooks fire on 1.x, so pick one up front, by API, not by first event.
	const hasContextWithSystem =
		typeof pi.registerMcpServer === "function" || typeof pi.registerVirtualModel === "function";
	const contextHandler = async (event: any, ctx: any) => {
		try {
			const out = await onContext(event?.messages, ctx);
			return out ? { messages: out } : undefined;
		} catch {
			return undefined;
		}
	};
	pi.on(hasContextWithSystem ? "context_with_system" : "context", contextHandler);

	// Observation only (returning nothing keeps the payload): the cache lifetime it asks for.
	pi.on("before_provider_request", (event: any) => {
		try {
			askedTtlS = payloadTtlS(event?.payload);
		} catch {}
		return undefined;
	});

	pi.on("turn_end", (event: any, ctx: any) => {
		// Not awaited: on pi 1.x turn_end blocks the agent loop.
		try {
			if (!sessionId) return;
			const u = event?.message?.usage ?? {};
			const m = event?.message;
			outbox.push(
				"/v1/turn_end",
				{
					session_id: sessionId,
					turn_index: Number(event?.turnIndex ?? 0),
					input_tokens: u.input ?? 0,
					output_tokens: u.output ?? 0,
					cache_read_tokens: u.cacheRead ?? 0,
					cache_write_tokens: u.cacheWrite ?? 0,
					model: m?.provider && m?.model ? `${m.provider}/${m.model}` : null,
					// the request this usage is of: the cost model prices it on the cache entry
					// the provider read (docs/accounting.md)
					call_index: callIndex > 0 ? callIndex - 1 : null,
				},
				(reply) => {
					applyConfig(reply?.config); // a reloaded config.toml reaches running sessions here
					updateStatus(ctx, reply?.totals);
					if (reply?.totals) lastTotals = reply.totals;
				},
			);
		} catch {}
	});

	// Compaction timing (docs/accounting.md): pi compacts when the context the provider
	// reports crosses its threshold, and ctxwrap's context is smaller, so pi alone would
	// compact later and meanwhile carry far more than plain pi, which had compacted (replayed
	// on the real pi sessions: the median saving falls from 30 to 19 %). When the daemon's
	// plain counterfactual has compacted more often than this session, ask pi to compact once
	// the run has ended — never mid-run (ctx.compact aborts a running loop, pi #6096) — and
	// here only with a UI: a print run ends here, and a summary nobody continues is money lost;
	// a print run's session compacts when a later print run continues it (compactBeforePrintRun).
	const compactLikePlain = (event: any, ctx: any) => {
		if (!cfg.compact_like_plain || cfg.off || !sessionId || !ctx?.hasUI || event?.aborted) return;
		if (typeof ctx.compact !== "function") return;
		// Not awaited: the last turn's totals are still on their way (turn_end is queued).
		void (async () => {
			try {
				await outbox.flush(1000);
				const plainC = plainCompactedAhead();
				if (plainC === null) return;
				// The user may have started the next run meanwhile: compacting would abort it.
				if (ctx.isIdle?.() === false || ctx.hasPendingMessages?.() === true) return;
				compactAskedAt = plainC;
				trace(`compact like plain: plain pi compacted ${plainC}, this session ${Number(lastTotals?.compactions) || 0}`);
				try {
					ctx.ui?.notify?.(
						"ctxwrap: compacting now, where pi would have without ctxwrap (compact_like_plain = false turns this off)",
						"info",
					);
				} catch {}
				compactAsked = true;
				ctx.compact({
					onComplete: () => {
						compactAsked = false;
						trace("compact like plain: done");
					},
					onError: (e: any) => {
						compactAsked = false;
						trace(`compact like plain: ${e?.message ?? e}`);
					},
				});
			} catch {}
		})();
	};
	/** Plain pi's compaction count when it is ahead of this session's and not asked for yet. */
	const plainCompactedAhead = (): number | null => {
		const plainC = Number(lastTotals?.plain_compactions) || 0;
		const c = Number(lastTotals?.compactions) || 0;
		return plainC > c && plainC > compactAskedAt ? plainC : null;
	};

	// Print mode (`pi -p`, no UI): the run ends at agent_end, where a summary the session may
	// never continue from would be money lost. A later print run of the session (`pi -p
	// --continue`, `--session FILE`) compacts first instead — here, from session_start, where
	// nothing runs yet (no loop to abort) and pi awaits the handler before it takes the run's
	// prompt, so the run's first request carries the summary. The start's reply has the
	// session's totals: plain pi compacted in an earlier run and the session did not.
	const compactBeforePrintRun = async (ctx: any) => {
		if (typeof ctx?.compact !== "function") return;
		let entries: any[] = [];
		try {
			entries = ctx.sessionManager?.getBranch?.() ?? ctx.sessionManager?.getEntries?.() ?? [];
		} catch {}
		if (!entries.some((e) => e?.type === "message")) return; // a new session: nothing to wait for
		const wait = startWait;
		if (wait) await wait; // the daemon's answer (or its deadline): its config and totals
		if (!cfg.compact_like_plain || cfg.off || !sessionId) return;
		const plainC = plainCompactedAhead();
		if (plainC === null) return;
		if (ctx.isIdle?.() === false || ctx.hasPendingMessages?.() === true) return;
		compactAskedAt = plainC;
		trace(`compact like plain, before the print run: plain pi compacted ${plainC}, this session ${Number(lastTotals?.compactions) || 0}`);
		compactAsked = true;
		// Awaited to its end: a prompt sent while pi compacts is refused (pi 1.6) or races it.
		const failed = await new Promise<unknown>((resolve) => {
			try {
				ctx.compact({ onComplete: () => resolve(null), onError: (e: any) => resolve(e ?? "failed") });
			} catch (e) {
				resolve(e ?? "failed");
			}
		});
		compactAsked = false;
		if (failed) {
			trace(`compact like plain: ${(failed as any)?.message ?? failed}`);
			return; // the run goes on uncompacted, as it would have without this
		}
		trace("compact like plain: done");
		try {
			process.stderr.write(
				"ctxwrap: compacted this session where pi would have without ctxwrap (compact_like_plain = false turns this off)\n",
			);
		} catch {}
	};

	// Interactive, a session resumed after print runs (`ctxwrap pi -c`): plain pi compacted in
	// them and the session did not, so ask now, while the editor is idle, not after the first
	// run (one run late). pi queues what the user submits meanwhile and sends it after the
	// summary (both versions: compactionQueuedMessages), so nothing waits on it but that prompt.
	const compactOnResume = async (ctx: any) => {
		try {
			const wait = startWait;
			if (wait) await wait; // the daemon's answer: its config and the session's totals
			compactLikePlain({}, ctx);
		} catch {}
	};

	pi.on("agent_end", compactLikePlain);
	// pi 1.x: also once the run has settled (no retry, compaction or continuation pending),
	// for a run that was not idle yet at agent_end; the count asked for keeps it to one ask.
	pi.on("agent_settled", compactLikePlain);

	registerTools(pi, daemon, () => sessionId, () => cfg, { whenCatalogReady, sendCatalog });

	try {
		pi.registerCommand("ctx-stats", {
			description: "ctxwrap: what this session saved, per mechanism, net of ctxwrap's own model calls",
			handler: async (_args: string, ctx: any) => {
				const reply = sessionId
					? await daemon.get<Json>(`/v1/stats?session=${encodeURIComponent(sessionId)}&width=${ctxStatsWidth()}`, 3000)
					: null;
				const text = reply?.text ?? "ctxwrap: no statistics (the daemon is unavailable or nothing was recorded yet)";
				updateStatus(ctx, reply?.totals);
				try {
					ctx.ui?.notify?.(text, "info");
				} catch {}
			},
		});
	} catch {}
}

/**
 * The width /ctx-stats' text is drawn for: the terminal's, read as pi's TUI reads it (pi-tui's
 * ProcessTerminal.columns: stdout's columns, else COLUMNS, else 80), less the one column of
 * padding pi puts on each side of a notice, so no row of the table is folded in two.
 */
export function ctxStatsWidth(
	columns: number | undefined = process.stdout.columns,
	envColumns: string | undefined = process.env.COLUMNS,
): number {
	const terminal = columns || Number(envColumns) || 80;
	return Math.min(1000, Math.max(20, Math.floor(terminal) - 2)); // the daemon takes 20–1000
}

/** What find_capability needs of the session: its catalog at the daemon. */
interface CatalogAccess {
	whenCatalogReady: (waitMs: number) => Promise<boolean>;
	sendCatalog: (deadlineMs: number) => Promise<boolean>;
}

export const CATALOG_NOT_READY = "find_capability: ctxwrap's catalog is not ready; call again.";

function registerTools(pi: any, daemon: Daemon, sid: () => string | null, conf: () => BridgeConfig, catalog: CatalogAccess): void {
	const text = (t: string) => ({ content: [{ type: "text", text: t }], details: {} });
	try {
		pi.registerTool({
			name: "ctx_recall",
			label: "Recall output",
			description:
				"Search a command output or file result that ctxwrap digested or hid. Give the handle from the " +
				"[ctxwrap …] note and a regex pattern (or a line range). Returns matching lines only, never the whole output.",
			parameters: {
				type: "object",
				properties: {
					handle: { type: "string", description: "The handle from the ctxwrap note, e.g. r1a2b3c4d" },
					pattern: { type: "string", description: "Regular expression to search for (case-insensitive)" },
					start_line: { type: "number", description: "First line of a range (1-based)" },
					end_line: { type: "number", description: "Last line of a range" },
					context_lines: { type: "number", description: "Lines of context around each match (0-20)" },
				},
				required: ["handle"],
			},
			async execute(_id: string, params: any) {
				const reply = await daemon.call<Json>(
					"/v1/recall",
					{
						handle: String(params?.handle ?? ""),
						pattern: params?.pattern ?? null,
						start_line: params?.start_line ?? null,
						end_line: params?.end_line ?? null,
						context_lines: Math.min(20, Math.max(0, Number(params?.context_lines ?? 0) || 0)),
						session_id: sid(),
					},
					conf().bridge_timeout_ms * 2,
				);
				if (!reply) return text("ctx_recall: unknown handle, or the ctxwrap daemon is unavailable.");
				const head = `[${reply.matched_lines} matching line(s) of ${reply.total_lines}${reply.truncated ? "; more matches cut, narrow the pattern" : ""}]`;
				return text(`${head}\n${reply.text}`);
			},
		});
	} catch {}
	if (!conf().lazy) return;
	try {
		pi.registerTool({
			name: "find_capability",
			label: "Find capability",
			description:
				"Find a skill or tool for a task by describing what you need (e.g. 'extract text from PDF files'). " +
				"Returns the best skill's instructions, or makes the best tool callable.",
			parameters: {
				type: "object",
				properties: { query: { type: "string", description: "What you need to do, in plain words" } },
				required: ["query"],
			},
			async execute(_id: string, params: any, _signal?: unknown, _onUpdate?: unknown, ctx?: any) {
				// The first call can come before the daemon has this session (it starts beside pi):
				// wait for the registration and its catalog, bounded; an answer from an empty
				// catalog ("nothing matched") would hide a skill the prompt no longer lists.
				const session = sid();
				const wait = conf().bridge_timeout_ms * 4;
				if (!session || !(await catalog.whenCatalogReady(wait))) return text(CATALOG_NOT_READY);
				const search = () =>
					daemon.call<Json>(
						"/v1/capabilities/search",
						{ session_id: session, query: String(params?.query ?? "").slice(0, 2000) || "?" },
						conf().bridge_timeout_ms * 2,
						false, // the model asked: tried even while an earlier deadline suspends the bridge
					);
				let reply = await search();
				if (reply?.catalog_ready === false && (await catalog.sendCatalog(conf().bridge_timeout_ms * 2))) {
					reply = await search(); // a restarted daemon that lost the catalog has it again
				}
				if (!reply || reply.catalog_ready === false) return text(CATALOG_NOT_READY);
				const others = (reply.matches ?? [])
					.slice(1)
					.map((m: Json) => `- ${m.kind} ${m.name}: ${String(m.description).slice(0, 120)}`)
					.join("\n");
				if (reply.skill_body) {
					return text(`<skill name="${reply.matches[0].name}" location="${reply.skill_path}">\n${reply.skill_body}\n</skill>${others ? `\n\nOther matches:\n${others}` : ""}`);
				}
				if (reply.activate_tool && checksThinkingPrefix(ctx?.model?.id ?? cache.model)) {
					// A model that binds its thinking to the tool list (Claude Fable 5.1, the 5.5
					// models) would have the conversation's earlier reasoning refused (a 400) or
					// dropped once the list changes: the tool is named, not added.
					const m = reply.matches[0];
					return text(
						`Tool ${m.name} exists (${m.description}) but cannot be added mid-conversation on this model: ` +
							`a changed tool list invalidates its earlier reasoning. It can be enabled at launch (pi --tools +${m.name}).`,
					);
				}
				if (reply.activate_tool) {
					try {
						const active: string[] = pi.getActiveTools?.() ?? [];
						// Only ever add: removing later would cost a second cache rewrite.
						if (!active.includes(reply.activate_tool)) pi.setActiveTools([...active, reply.activate_tool]);
					} catch {}
					const m = reply.matches[0];
					return text(`Tool ${m.name} is now available: ${m.description}${others ? `\n\nOther matches:\n${others}` : ""}`);
				}
				return text("find_capability: nothing matched; describe the task differently.");
			},
		});
	} catch {}
}

