// The bridge side of the golden protocol frames (tests/fixtures/frames/, also read by
// tests/unit/test_protocol_frames.py). Run: node --test tests/node/*.test.ts
//
// Reply frames decode through the bridge's own functions where it has them (asEdit,
// applyEdits); elsewhere the fields ctxwrap-bridge.ts reads are checked for presence and
// JS type. Request frames with stored messages must carry exactly describeTail's output.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { applyEdits, asEdit, describeTail, tailIds } from "../../ctxwrap/_bridge/edits.ts";

const here = dirname(fileURLToPath(import.meta.url));
const FRAMES = join(here, "..", "fixtures", "frames");
const BRIDGE = readFileSync(join(here, "..", "..", "ctxwrap", "_bridge", "ctxwrap-bridge.ts"), "utf8");

interface FrameFile {
  model: string;
  direction: "bridge->daemon" | "daemon->bridge";
  route: string;
  frame: Record<string, any>;
  messages?: unknown[];
  seen?: string[];
  note?: string;
}

const files: Array<[string, FrameFile]> = readdirSync(FRAMES)
  .filter((f) => f.endsWith(".json"))
  .sort()
  .map((f) => [f, JSON.parse(readFileSync(join(FRAMES, f), "utf8")) as FrameFile]);

const byModel = (model: string) => files.filter(([, d]) => d.model === model);
const load = (name: string): FrameFile => {
  const hit = files.find(([f]) => f === name);
  assert.ok(hit, `missing frame ${name}`);
  return hit[1];
};

const isStr = (v: unknown) => typeof v === "string";
const isNum = (v: unknown) => typeof v === "number" && Number.isFinite(v);
const isBool = (v: unknown) => typeof v === "boolean";
const isObj = (v: unknown) => typeof v === "object" && v !== null && !Array.isArray(v);

/** The fields of the bridge's `interface NAME { … }` with their declared types. */
function bridgeInterface(name: string): Record<string, string> {
  const m = new RegExp(`interface ${name} \\{([^}]*)\\}`).exec(BRIDGE);
  assert.ok(m, `interface ${name} not found in ctxwrap-bridge.ts`);
  const out: Record<string, string> = {};
  for (const line of m[1].split("\n")) {
    const f = /^\s*(\w+):\s*([^;]+);/.exec(line);
    if (f) out[f[1]] = f[2].trim();
  }
  return out;
}

function hasJsType(value: unknown, declared: string): boolean {
  return declared.split("|").some((t) => {
    const want = t.trim();
    if (want === "null") return value === null;
    if (want === "string") return isStr(value);
    if (want === "number") return isNum(value);
    if (want === "boolean") return isBool(value);
    return false;
  });
}

test("frames are there and well formed", () => {
  assert.ok(files.length >= 20, `only ${files.length} frames in ${FRAMES}`);
  for (const [name, d] of files) {
    assert.ok(isStr(d.model) && isStr(d.route), name);
    assert.ok(d.direction === "bridge->daemon" || d.direction === "daemon->bridge", name);
    assert.ok(isObj(d.frame), name);
  }
});

test("health: the protocol the bridge expects", () => {
  const m = /const PROTOCOL = (\d+);/.exec(BRIDGE);
  assert.ok(m, "PROTOCOL constant not found in ctxwrap-bridge.ts");
  const h = load("health.json").frame;
  assert.equal(h.protocol, Number(m[1]));
  assert.equal(h.status, "ok");
  assert.ok(isNum(h.pid) && isStr(h.version) && isStr(h.socket));
});

test("session_start reply: config covers every BridgeConfig field, with its type", () => {
  const reply = load("session_start_reply.json").frame;
  assert.ok(isObj(reply.config));
  const fields = bridgeInterface("BridgeConfig");
  assert.ok(Object.keys(fields).length >= 10);
  for (const [key, declared] of Object.entries(fields)) {
    assert.ok(key in reply.config, `config lacks ${key}`);
    assert.ok(hasJsType(reply.config[key], declared), `config.${key}=${JSON.stringify(reply.config[key])} is not ${declared}`);
  }
  // updateStatus reads these with Number(); they must be numbers already
  assert.ok(isNum(reply.totals.saved_tokens) && isNum(reply.totals.net_tokens));
  // TagPace.known reads the tagger's pace of earlier sessions: numbers (ms)
  assert.ok(Array.isArray(reply.tag_pace_ms) && reply.tag_pace_ms.every(isNum));
});

test("ack: an object whose config is null or an object", () => {
  for (const [name, d] of byModel("Ack")) {
    assert.equal(d.frame.ok, true, name);
    assert.ok(d.frame.config === null || isObj(d.frame.config), name);
  }
});

test("tool_result replies: the fields onBash / onMeta / onWrite read", () => {
  const fields = bridgeInterface("AuxRequest");
  for (const [name, d] of byModel("ToolResultReply")) {
    const r = d.frame;
    assert.ok(r.action === "pass" || r.action === "replace", name);
    if (r.action === "replace") assert.ok(isStr(r.text), `${name}: replace without text`);
    assert.ok(r.text === null || isStr(r.text), name);
    assert.ok(r.handle === null || isStr(r.handle), name);
    if (r.aux !== null) {
      for (const [key, declared] of Object.entries(fields)) {
        assert.ok(hasJsType(r.aux[key], declared), `${name}: aux.${key} is not ${declared}`);
      }
    }
  }
  const bash = load("tool_result_reply_bash.json").frame;
  assert.equal(bash.action, "replace");
  assert.equal(bash.aux.task, "digest");
  assert.ok(bash.text.includes(`handle="${bash.handle}"`));
  const read = load("tool_result_reply_read.json").frame;
  assert.equal(read.action, "pass");
  assert.equal(read.aux.task, "tag");
  const write = load("tool_result_reply_write.json").frame;
  assert.ok(isStr(write.text), "write reply carries the heuristic fact");
  assert.equal(write.aux.task, "fact");
});

test("aux_result requests carry the AuxOutcome fields runAux produces", () => {
  const outcome = bridgeInterface("AuxOutcome");
  for (const [name, d] of byModel("AuxResult")) {
    assert.ok(isStr(d.frame.session_id) && isStr(d.frame.aux_id), name);
    for (const [key, declared] of Object.entries(outcome)) {
      assert.ok(key in d.frame, `${name}: no ${key}`);
      assert.ok(hasJsType(d.frame[key], declared), `${name}: ${key} is not ${declared}`);
    }
  }
});

test("aux_result replies: accepted is a boolean; accepted text is a string", () => {
  for (const [name, d] of byModel("AuxResultReply")) {
    assert.ok(isBool(d.frame.accepted), name);
    assert.ok(d.frame.text === null || isStr(d.frame.text), name);
    if (d.frame.accepted) assert.ok(isStr(d.frame.text), name);
  }
});

test("context requests: tail is describeTail(messages, seen)", () => {
  const reqs = byModel("ContextRequest");
  assert.ok(reqs.length > 0);
  for (const [name, d] of reqs) {
    assert.ok(Array.isArray(d.messages) && Array.isArray(d.seen), `${name}: messages and seen are needed`);
    const tail = describeTail(d.messages, new Set(d.seen));
    assert.deepEqual(tail, d.frame.tail, name);
    assert.equal(d.frame.message_count, d.messages.length, name);
    for (const id of tailIds(tail)) assert.ok(!d.seen.includes(id), `${name}: ${id} was seen`);
  }
});

test("context replies: every edit decodes through asEdit", () => {
  const kinds = new Set<string>();
  for (const [name, d] of byModel("ContextReply")) {
    assert.ok(Array.isArray(d.frame.edits), name);
    for (const raw of d.frame.edits) {
      const ed = asEdit(raw);
      assert.ok(ed, `${name}: asEdit rejected ${JSON.stringify(raw)}`);
      assert.equal(ed.kind, raw.kind);
      assert.equal(ed.toolCallId, raw.toolCallId);
      assert.equal(ed.savedChars, raw.savedChars);
      if (ed.kind !== "remove") assert.equal(ed.text, raw.text);
      if (ed.kind === "strip_edit") assert.equal(ed.minChars, raw.minChars);
      kinds.add(ed.kind);
    }
  }
  assert.deepEqual([...kinds].sort(), ["mask", "remove", "strip_edit", "strip_write", "tombstone"]);
});

test("context replies apply to the request's messages as the bridge would", () => {
  const req = load("context_request.json");
  const messages = req.messages as any[];
  const inTail = new Set(tailIds(req.frame.tail));

  const edits = load("context_reply.json").frame.edits.map(asEdit);
  for (const ed of edits) assert.ok(ed && inTail.has(ed.toolCallId), "edits only target the tail");
  const sent = applyEdits(messages, edits) as any[];
  assert.equal(sent.length, messages.length);
  const tomb = edits.find((e) => e?.kind === "tombstone")!;
  const strip = edits.find((e) => e?.kind === "strip_write")!;
  const result = sent.find((m) => m.role === "toolResult" && m.toolCallId === tomb.toolCallId);
  assert.deepEqual(result.content, [{ type: "text", text: (tomb as any).text }]);
  const call = sent.flatMap((m) => (m.role === "assistant" ? m.content : [])).find((b: any) => b.id === strip.toolCallId);
  assert.equal(call.arguments.content, (strip as any).text);
  assert.equal(call.arguments.path, "src/slug.py", "the other arguments stay");
  // the prefix before the tail is passed through as the same objects
  for (let i = 0; i < req.frame.tail.start; i++) assert.equal(sent[i], messages[i]);

  const removed = applyEdits(messages, load("context_reply_remove.json").frame.edits) as any[];
  const gone = load("context_reply_remove.json").frame.edits[0].toolCallId;
  assert.ok(!removed.some((m) => m.toolCallId === gone));
  assert.ok(!removed.some((m) => m.role === "assistant" && m.content.some((b: any) => b.id === gone)));
});

test("recall reply: the fields ctx_recall reads", () => {
  for (const [name, d] of byModel("RecallReply")) {
    const r = d.frame;
    assert.ok(isStr(r.text) && isNum(r.matched_lines) && isNum(r.total_lines) && isBool(r.truncated), name);
  }
});

test("capability replies: the fields find_capability reads", () => {
  let skill = 0;
  let tool = 0;
  for (const [name, d] of byModel("CapabilityReply")) {
    const r = d.frame;
    assert.ok(Array.isArray(r.matches), name);
    for (const m of r.matches) assert.ok(isStr(m.kind) && isStr(m.name) && isStr(m.description) && isNum(m.score), name);
    assert.ok(r.skill_body === null || isStr(r.skill_body), name);
    assert.ok(r.activate_tool === null || isStr(r.activate_tool), name);
    if (r.skill_body) {
      skill++;
      assert.ok(isStr(r.matches[0]?.name) && isStr(r.skill_path), name);
    }
    if (r.activate_tool) {
      tool++;
      assert.equal(r.matches[0]?.name, r.activate_tool, name);
    }
  }
  assert.ok(skill > 0 && tool > 0, "one skill reply and one tool reply");
});
