// Frozen, tail-only context edits: the bridge side (DESIGN invariants 3-5).
//
// In pi's `context` handler the bridge sends `describeTail(messages, seen)` to the daemon,
// appends the edits it gets back to the session's frozen set, returns
// `applyEdits(messages, frozen)`, and then adds `tailIds(tail)` to `seen`.
//
// Twin of ctxwrap/engine/edits.py (apply_edits, describe_tail, args_sig); the golden cases in
// tests/fixtures/edits/ pin both. No imports: this file must load in any pi, under any loader.
//
// Lengths are UTF-16 code units ("chars", like `.length` and pi's chars/4 estimate) and
// UTF-8 bytes; the Python side counts the same way.

export interface TombstoneEdit {
  kind: "tombstone";
  toolCallId: string;
  text: string;
  savedChars: number;
}
export interface RemoveEdit {
  kind: "remove";
  toolCallId: string;
  savedChars: number;
}
export interface StripWriteEdit {
  kind: "strip_write";
  toolCallId: string;
  text: string;
  savedChars: number;
}
/** An applied edit call's replaced text (each oldText / old_string of at least minChars,
 * top-level or in `edits`) becomes `text`; the new text stays. */
export interface StripEditEdit {
  kind: "strip_edit";
  toolCallId: string;
  text: string;
  minChars: number;
  savedChars: number;
}
/** An older toolResult masked at a cold cache boundary; applied exactly like a tombstone. */
export interface MaskEdit {
  kind: "mask";
  toolCallId: string;
  text: string;
  savedChars: number;
  reason: string;
}
export type Edit = TombstoneEdit | RemoveEdit | StripWriteEdit | StripEditEdit | MaskEdit;
type ResultEdit = TombstoneEdit | RemoveEdit | MaskEdit;
type CallEdit = StripWriteEdit | StripEditEdit;

export interface TailToolCall {
  id: string;
  name: string;
  argsSig: string;
  argsChars: number;
  writePath?: string;
  writeContentChars?: number;
  writeContentBytes?: number;
  writeContentLines?: number;
  /** an edit call (EDIT_TOOLS): the length of each replaced text, in order */
  editOldChars?: number[];
}
export interface TailMessage {
  role: string;
  toolCalls?: TailToolCall[];
  hasText?: boolean;
  toolCallId?: string;
  toolName?: string;
  chars?: number;
  isError?: boolean;
}
export interface Tail {
  start: number;
  messages: TailMessage[];
}

type Rec = Record<string, unknown>;

function isRec(v: unknown): v is Rec {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** One edit from JSON, or null when malformed (same rules as edit_from_json in Python). */
export function asEdit(raw: unknown): Edit | null {
  if (!isRec(raw)) return null;
  const { kind, toolCallId, text, savedChars, reason } = raw;
  if (typeof toolCallId !== "string") return null;
  const saved = typeof savedChars === "number" && Number.isInteger(savedChars) ? savedChars : 0;
  if (kind === "remove") return { kind, toolCallId, savedChars: saved };
  if (typeof text !== "string") return null;
  if (kind === "tombstone" || kind === "strip_write") {
    return { kind, toolCallId, text, savedChars: saved };
  }
  if (kind === "strip_edit") {
    const { minChars } = raw;
    if (typeof minChars !== "number" || !Number.isInteger(minChars) || minChars < 1) return null;
    return { kind, toolCallId, text, minChars, savedChars: saved };
  }
  if (kind === "mask") {
    return { kind, toolCallId, text, savedChars: saved, reason: typeof reason === "string" ? reason : "" };
  }
  return null;
}

// An edit call's replaced text: pi's `edit` (`oldText`, top-level in its legacy form, else in
// `edits`), Claude Code's Edit (`old_string`) and MultiEdit (`edits[].old_string`).
const EDIT_TOOLS = new Set(["edit", "Edit", "MultiEdit"]);
const OLD_TEXT_KEYS = ["oldText", "old_string"] as const;

/** Every replaced text of an edit call's arguments, in order (top-level, then `edits`). */
export function editOldTexts(args: unknown): string[] {
  if (!isRec(args)) return [];
  const out: string[] = [];
  for (const k of OLD_TEXT_KEYS) if (typeof args[k] === "string") out.push(args[k] as string);
  const edits = args.edits;
  if (Array.isArray(edits)) {
    for (const e of edits) {
      if (!isRec(e)) continue;
      for (const k of OLD_TEXT_KEYS) if (typeof e[k] === "string") out.push(e[k] as string);
    }
  }
  return out;
}

/** The call's arguments with the strip applied, or null when it does not apply. */
function stripCallArgs(args: unknown, strip: CallEdit): Rec | null {
  if (!isRec(args)) return null;
  if (strip.kind === "strip_write") return "content" in args ? { ...args, content: strip.text } : null;
  const cut = (obj: Rec): Rec | null => {
    const keys = OLD_TEXT_KEYS.filter(
      (k) => typeof obj[k] === "string" && (obj[k] as string).length >= strip.minChars,
    );
    if (keys.length === 0) return null;
    const out: Rec = { ...obj };
    for (const k of keys) out[k] = strip.text;
    return out;
  };
  let out = cut(args);
  const edits = args.edits;
  if (Array.isArray(edits)) {
    const cutEdits = edits.map((e) => (isRec(e) ? cut(e) : null));
    if (cutEdits.some((c) => c !== null)) {
      out = { ...(out ?? args), edits: cutEdits.map((c, i) => c ?? edits[i]) };
    }
  }
  return out;
}

function isBlank(text: string): boolean {
  // An explicit ASCII set: trim() and Python's strip() disagree on Unicode whitespace.
  return !/[^ \t\n\r]/.test(text);
}

function keepsAssistant(content: readonly unknown[]): boolean {
  for (const block of content) {
    if (!isRec(block)) continue;
    if (block.type === "toolCall") return true;
    if (block.type === "text" && typeof block.text === "string" && !isBlank(block.text)) {
      return true;
    }
  }
  return false;
}

/**
 * The message list with the frozen edits applied. Pure: the input is never mutated, untouched
 * messages are passed through as the same objects, edited ones are shallow copies.
 *
 * The first edit per key wins (the one the model saw first), and each edit applies to the first
 * toolResult / toolCall block with its id only, so a reused id is never edited by a decision
 * made for an earlier call. Malformed edits are ignored: this runs in pi and must not throw.
 */
export function applyEdits<M>(messages: readonly M[], edits: Iterable<unknown>): M[] {
  const results = new Map<string, ResultEdit>();
  const strips = new Map<string, CallEdit>();
  let anyRemove = false;
  for (const raw of edits) {
    const e = asEdit(raw);
    if (e === null) continue;
    if (e.kind === "strip_write" || e.kind === "strip_edit") {
      if (!strips.has(e.toolCallId)) strips.set(e.toolCallId, e);
    } else if (!results.has(e.toolCallId)) {
      results.set(e.toolCallId, e);
      if (e.kind === "remove") anyRemove = true;
    }
  }
  if (results.size === 0 && strips.size === 0) return messages.slice();
  const callEdits = strips.size > 0 || anyRemove;
  const usedResults = new Set<string>();
  const usedCalls = new Set<string>();
  const out: M[] = [];
  for (const m of messages) {
    const msg: unknown = m;
    if (!isRec(msg)) {
      out.push(m);
      continue;
    }
    const role = msg.role;
    if (role === "toolResult") {
      const cid = msg.toolCallId;
      const edit = typeof cid === "string" ? results.get(cid) : undefined;
      if (edit === undefined || usedResults.has(edit.toolCallId)) {
        out.push(m);
        continue;
      }
      usedResults.add(edit.toolCallId);
      if (edit.kind === "tombstone" || edit.kind === "mask") {
        out.push({ ...msg, content: [{ type: "text", text: edit.text }] } as M);
      }
      continue; // a remove edit drops the message
    }
    const content = msg.content;
    if (role !== "assistant" || !callEdits || !Array.isArray(content)) {
      out.push(m);
      continue;
    }
    let newContent: unknown[] | null = null;
    let removed = false;
    for (let i = 0; i < content.length; i++) {
      const block: unknown = content[i];
      if (isRec(block) && block.type === "toolCall") {
        const bid = block.id;
        if (typeof bid === "string" && !usedCalls.has(bid)) {
          const redit = results.get(bid);
          if (redit !== undefined && redit.kind === "remove") {
            usedCalls.add(bid);
            if (newContent === null) newContent = content.slice(0, i);
            removed = true;
            continue;
          }
          const strip = strips.get(bid);
          if (strip !== undefined) {
            usedCalls.add(bid);
            const args = stripCallArgs(block.arguments, strip);
            if (args !== null) {
              if (newContent === null) newContent = content.slice(0, i);
              newContent.push({ ...block, arguments: args });
              continue;
            }
          }
        }
      }
      if (newContent !== null) newContent.push(block);
    }
    if (newContent === null) out.push(m);
    else if (removed && !keepsAssistant(newContent)) continue; // emptied by a removal
    else out.push({ ...msg, content: newContent } as M);
  }
  return out;
}

// -- the call signature: FNV-1a 64 over UTF-8 of canonical JSON [name, arguments] ----------

/** JSON with keys sorted by UTF-16 code units; numbers and strings as JSON.stringify. */
export function canon(v: unknown): string {
  if (v === null || v === undefined) return "null";
  switch (typeof v) {
    case "string":
      return JSON.stringify(v);
    case "number":
      return Number.isFinite(v) ? JSON.stringify(v) : "null";
    case "boolean":
      return v ? "true" : "false";
    case "object": {
      if (Array.isArray(v)) return "[" + v.map(canon).join(",") + "]";
      const o = v as Rec;
      const parts: string[] = [];
      for (const k of Object.keys(o).sort()) {
        const x = o[k];
        if (x === undefined || typeof x === "function" || typeof x === "symbol") continue;
        parts.push(JSON.stringify(k) + ":" + canon(x));
      }
      return "{" + parts.join(",") + "}";
    }
    default:
      return "null";
  }
}

/** FNV-1a 64 of the UTF-8 bytes of `s`, 16 hex digits. 16-bit limbs: no BigInt in the loop. */
export function fnv1a64(s: string): string {
  let h0 = 0x2325;
  let h1 = 0x8422;
  let h2 = 0x9ce4;
  let h3 = 0xcbf2;
  const feed = (b: number): void => {
    h0 ^= b;
    // multiply by the prime 2^40 + 0x1b3, modulo 2^64
    const t0 = h0 * 0x1b3;
    const c1 = h1 * 0x1b3 + (t0 >>> 16);
    const c2 = h2 * 0x1b3 + (h0 << 8) + (c1 >>> 16);
    h3 = (h3 * 0x1b3 + (h1 << 8) + (c2 >>> 16)) & 0xffff;
    h2 = c2 & 0xffff;
    h1 = c1 & 0xffff;
    h0 = t0 & 0xffff;
  };
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    const d = i + 1 < s.length ? s.charCodeAt(i + 1) : 0;
    if (c < 0x80) feed(c);
    else if (c < 0x800) {
      feed(0xc0 | (c >> 6));
      feed(0x80 | (c & 0x3f));
    } else if (c >= 0xd800 && c <= 0xdbff && d >= 0xdc00 && d <= 0xdfff) {
      const cp = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
      feed(0xf0 | (cp >> 18));
      feed(0x80 | ((cp >> 12) & 0x3f));
      feed(0x80 | ((cp >> 6) & 0x3f));
      feed(0x80 | (cp & 0x3f));
      i++;
    } else {
      // BMP, or a lone surrogate as its own 3 bytes (Python's "surrogatepass")
      feed(0xe0 | (c >> 12));
      feed(0x80 | ((c >> 6) & 0x3f));
      feed(0x80 | (c & 0x3f));
    }
  }
  const hex = (x: number): string => x.toString(16).padStart(4, "0");
  return hex(h3) + hex(h2) + hex(h1) + hex(h0);
}

export function argsSig(name: string, args: unknown): string {
  return fnv1a64("[" + JSON.stringify(name) + "," + canon(args) + "]");
}

function isLow(c: number): boolean {
  return c >= 0xdc00 && c <= 0xdfff;
}

function utf8Length(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && isLow(s.charCodeAt(i + 1))) {
      n += 4;
      i++;
    } else n += 3;
  }
  return n;
}

function lineCount(s: string): number {
  let n = 0;
  for (let i = s.indexOf("\n"); i !== -1; i = s.indexOf("\n", i + 1)) n++;
  return n + (s.length > 0 && !s.endsWith("\n") ? 1 : 0);
}

// -- the tail descriptor ---------------------------------------------------------------------

function references(msg: unknown, seen: ReadonlySet<string>): boolean {
  if (!isRec(msg)) return false;
  if (msg.role === "toolResult") {
    return typeof msg.toolCallId === "string" && seen.has(msg.toolCallId);
  }
  if (msg.role === "assistant" && Array.isArray(msg.content)) {
    for (const b of msg.content) {
      if (isRec(b) && b.type === "toolCall" && typeof b.id === "string" && seen.has(b.id)) {
        return true;
      }
    }
  }
  return false;
}

function describeCall(block: Rec): TailToolCall | null {
  const id = block.id;
  if (typeof id !== "string") return null;
  const name = typeof block.name === "string" ? block.name : "";
  const args = block.arguments;
  const c = canon(args);
  const call: TailToolCall = {
    id,
    name,
    argsSig: fnv1a64("[" + JSON.stringify(name) + "," + c + "]"),
    argsChars: c.length,
  };
  if (name === "write" && isRec(args)) {
    if (typeof args.path === "string") call.writePath = args.path;
    const content = args.content;
    if (typeof content === "string") {
      call.writeContentChars = content.length;
      call.writeContentBytes = utf8Length(content);
      call.writeContentLines = lineCount(content);
    }
  }
  if (EDIT_TOOLS.has(name)) {
    const olds = editOldTexts(args);
    if (olds.length > 0) call.editOldChars = olds.map((t) => t.length);
  }
  return call;
}

export function describeMessage(msg: unknown): TailMessage {
  if (!isRec(msg)) return { role: "" };
  const role = typeof msg.role === "string" ? msg.role : "";
  const content = msg.content;
  if (role === "assistant") {
    const toolCalls: TailToolCall[] = [];
    let hasText = false;
    if (Array.isArray(content)) {
      for (const b of content) {
        if (!isRec(b)) continue;
        if (b.type === "toolCall") {
          const call = describeCall(b);
          if (call !== null) toolCalls.push(call);
        } else if (b.type === "text" && typeof b.text === "string" && !isBlank(b.text)) {
          hasText = true;
        }
      }
    }
    return { role, toolCalls, hasText };
  }
  if (role === "toolResult" && typeof msg.toolCallId === "string") {
    let chars = 0;
    if (Array.isArray(content)) {
      for (const b of content) {
        if (isRec(b) && b.type === "text" && typeof b.text === "string") chars += b.text.length;
      }
    }
    return {
      role,
      toolCallId: msg.toolCallId,
      toolName: typeof msg.toolName === "string" ? msg.toolName : "",
      chars,
      isError: msg.isError === true,
    };
  }
  return { role };
}

/**
 * What the daemon needs to decide edits, without message bodies: the messages after the last
 * one that references a seen toolCallId (a toolResult or a toolCall block), described.
 */
export function describeTail(messages: readonly unknown[], seen: ReadonlySet<string>): Tail {
  let start = 0;
  for (let i = messages.length - 1; i >= 0; i--) {
    if (references(messages[i], seen)) {
      start = i + 1;
      break;
    }
  }
  const described: TailMessage[] = [];
  for (let i = start; i < messages.length; i++) described.push(describeMessage(messages[i]));
  return { start, messages: described };
}

/**
 * Every id the tail mentions (results and calls). Add them to `seen` once the request is sent,
 * even when the daemon did not answer: the model has now received these messages as they were.
 */
export function tailIds(tail: Tail): string[] {
  const ids: string[] = [];
  for (const m of tail.messages) {
    if (m.toolCallId !== undefined) ids.push(m.toolCallId);
    for (const c of m.toolCalls ?? []) ids.push(c.id);
  }
  return ids;
}

/**
 * Every toolCallId in `messages`. Seed `seen` with it on the first `context` event after the
 * bridge (re)starts on an existing session (/resume, reload, fork): the model has received
 * that history already, so none of it may count as tail.
 */
export function allToolCallIds(messages: readonly unknown[]): string[] {
  const ids: string[] = [];
  for (const msg of messages) {
    if (!isRec(msg)) continue;
    if (msg.role === "toolResult" && typeof msg.toolCallId === "string") ids.push(msg.toolCallId);
    else if (msg.role === "assistant" && Array.isArray(msg.content)) {
      for (const b of msg.content) {
        if (isRec(b) && b.type === "toolCall" && typeof b.id === "string") ids.push(b.id);
      }
    }
  }
  return ids;
}
