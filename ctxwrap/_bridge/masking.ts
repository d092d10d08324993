// Cache-aware observation masking: the bridge side (docs/architecture.md, "History masking").
//
// The daemon decides which older results to mask (ctxwrap/engine/masking.py); the bridge only
// says when the prompt cache is cold anyway, describes the whole history for that one request,
// and checks each mask it gets back before freezing it like any other edit.
//
// `callPaths` is the twin of call_paths in masking.py; tests/fixtures/masking/ pins both.
// No imports: this file must load in any pi, under any loader.

type Rec = Record<string, unknown>;

function isRec(v: unknown): v is Rec {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

const PATH_TOOLS = new Set(["read", "Read", "write", "edit", "Write", "Edit", "MultiEdit"]);

/** toolCallId → the file path of every read/write/edit call (`path` or `file_path`). */
export function callPaths(messages: readonly unknown[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const msg of messages) {
    if (!isRec(msg) || msg.role !== "assistant" || !Array.isArray(msg.content)) continue;
    for (const b of msg.content) {
      if (!isRec(b) || b.type !== "toolCall") continue;
      const { id, name, arguments: args } = b;
      if (typeof id !== "string" || typeof name !== "string" || !PATH_TOOLS.has(name) || !isRec(args)) continue;
      const path = "path" in args ? args.path : args.file_path;
      if (typeof path === "string" && !Object.prototype.hasOwnProperty.call(out, id)) out[id] = path;
    }
  }
  return out;
}

/**
 * The newest assistant `timestamp` (ms) among messages[0:end]: on a resumed session, when the
 * provider last used the cache. On the first request of a process every assistant message is
 * from an earlier process (the new prompt is a user message, stamped now).
 */
export function lastRequestAt(messages: readonly unknown[], end: number): number | null {
  let best: number | null = null;
  for (let i = 0; i < Math.min(end, messages.length); i++) {
    const m = messages[i];
    if (!isRec(m) || m.role !== "assistant") continue;
    const t = m.timestamp;
    if (typeof t === "number" && Number.isFinite(t) && (best === null || t > best)) best = t;
  }
  return best;
}

/**
 * The prompt-cache lifetime (s) a provider payload asks for beyond the default, or null.
 * Under `PI_CACHE_RETENTION=long` pi sends Anthropic blocks `cache_control.ttl: "1h"`, OpenAI
 * `prompt_cache_retention: "24h"` or `prompt_cache_options.ttl: "30m"` (by model): a pause
 * inside that lifetime leaves the cache warm. Twin of cache_state.marked_ttl_s (Anthropic).
 */
export function payloadTtlS(payload: unknown): number | null {
  if (!isRec(payload)) return null;
  let best: number | null = null;
  // at most a day: the daemon refuses a longer lifetime, and with it the call's statistics
  const take = (s: number) => {
    if (Number.isFinite(s) && (best === null || s > best)) best = Math.min(s, 86_400);
  };
  if (payload.prompt_cache_retention === "24h") take(86_400);
  const opts = payload.prompt_cache_options;
  if (isRec(opts) && typeof opts.ttl === "string") {
    const m = /^(\d+)([mh])$/.exec(opts.ttl);
    if (m) take(Number(m[1]) * (m[2] === "h" ? 3600 : 60));
  }
  // Markers sit on the system prompt, the tools and the newest messages: older messages are not
  // walked (this runs before every request pi sends).
  const walk = (v: unknown, depth: number): void => {
    if (depth > 5) return; // list → message → content → block → its content → block
    if (Array.isArray(v)) {
      for (const x of v) walk(x, depth + 1);
      return;
    }
    if (!isRec(v)) return;
    const cc = v.cache_control;
    if (isRec(cc) && cc.ttl === "1h") take(3600);
    walk(v.content, depth + 1);
  };
  walk(payload.system, 0);
  walk(payload.tools, 0);
  if (Array.isArray(payload.messages)) walk(payload.messages.slice(-4), 0);
  return best !== null && best > 300 ? best : null;
}

export type ColdReason = "idle" | "compaction" | "model" | "tools";

export interface CacheState {
  lastAt: number | null; // ms of the previous request of this process
  model: string | null;
  tools: string | null;
}

/**
 * Why the provider's prompt cache cannot hold this request's prefix, or null while it is warm.
 * `headChanged`: the first message differs (compaction, a branch); `prevAt`: when the previous
 * request went out (on a resumed session: `lastRequestAt` of the history). `prev` is this
 * process's previous request (all null before the first one).
 */
export function coldReason(
  prev: CacheState,
  now: { at: number; model: string | null; tools: string | null },
  prevAt: number | null,
  headChanged: boolean,
  ttlMs: number,
): ColdReason | null {
  if (headChanged) return "compaction";
  if (prev.model !== null && now.model !== null && prev.model !== now.model) return "model";
  if (prev.tools !== null && now.tools !== null && prev.tools !== now.tools) return "tools";
  if (prevAt !== null && now.at - prevAt > ttlMs) return "idle";
  return null;
}

/**
 * The masks the bridge accepts: the daemon's answer is checked, not trusted. A mask may only
 * hide an existing, seen, non-error toolResult that has no edit yet; each at most once.
 */
export function acceptableMasks(
  messages: readonly unknown[],
  candidates: readonly { toolCallId: string }[],
  seen: ReadonlySet<string>,
  edited: ReadonlySet<string>,
): Set<string> {
  const ok = new Set<string>();
  const wanted = new Set(candidates.map((c) => c.toolCallId));
  if (wanted.size === 0) return ok;
  const calls = new Set<string>();
  for (const m of messages) {
    if (!isRec(m)) continue;
    if (m.role === "assistant" && Array.isArray(m.content)) {
      for (const b of m.content) if (isRec(b) && b.type === "toolCall" && typeof b.id === "string") calls.add(b.id);
    } else if (m.role === "toolResult" && typeof m.toolCallId === "string") {
      const id = m.toolCallId;
      if (wanted.has(id) && calls.has(id) && seen.has(id) && !edited.has(id) && m.isError !== true) ok.add(id);
    }
  }
  return ok;
}

// Models that check a returned thinking block's prefix ("preserved thinking": Claude Fable 5.1
// and Opus/Sonnet/Haiku 5.5 on): anything before a thinking block that changed since the model
// wrote it gets the request refused (400) or the block dropped. Twin of
// checks_thinking_prefix in anthropic_wire.py.
const CHECKED_FROM: Record<string, [number, number]> = { opus: [5, 5], sonnet: [5, 5], haiku: [5, 5], fable: [5, 1], mythos: [5, 1] };

/** Whether `model` checks its thinking blocks' prefix; a Claude model not placed is taken to. */
export function checksThinkingPrefix(model: unknown): boolean {
  if (typeof model !== "string") return false;
  let name = (model.split("/").pop() ?? "").toLowerCase();
  if (name.startsWith("anthropic.")) name = name.slice("anthropic.".length);
  if (!name.startsWith("claude-") || /^claude-\d/.test(name)) return false; // the old naming: no check
  const m = /^claude-([a-z]+)-(\d+)(?:[-.](\d+))?/.exec(name);
  if (!m || !Object.prototype.hasOwnProperty.call(CHECKED_FROM, m[1])) return true;
  const major = Number(m[2]);
  const minor = m[3] !== undefined && m[3].length <= 2 ? Number(m[3]) : 0;
  const [fromMajor, fromMinor] = CHECKED_FROM[m[1]];
  return major > fromMajor || (major === fromMajor && minor >= fromMinor);
}

/** The tool calls and results a later thinking block has in its prefix (in a later message,
 * or later in the same one): editing one invalidates that block. Twin of bound_by_thinking. */
export function boundByThinking(messages: readonly unknown[]): Set<string> {
  const before = new Set<string>();
  let pending: string[] = [];
  for (const m of messages) {
    if (!isRec(m)) continue;
    if (m.role === "assistant" && Array.isArray(m.content)) {
      for (const b of m.content) {
        if (!isRec(b)) continue;
        if (b.type === "thinking") {
          for (const id of pending) before.add(id);
          pending = [];
        } else if (b.type === "toolCall" && typeof b.id === "string") pending.push(b.id);
      }
    } else if (m.role === "toolResult" && typeof m.toolCallId === "string") pending.push(m.toolCallId);
  }
  return before;
}
