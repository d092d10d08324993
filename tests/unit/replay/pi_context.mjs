// Context sizes pi itself builds before each assistant message of a session: pi's own
// migration (migrateSessionEntries) and context builder (buildSessionContext, convertToLlm).
// argv: pi-coding-agent's dist directory, a JSON file of the session's entries, and N: only
// every Nth call and each call right after a compaction are measured (null for the others).
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
const sm = await import(pathToFileURL(process.argv[2] + "/core/session-manager.js").href);
const msgs = await import(pathToFileURL(process.argv[2] + "/core/messages.js").href);
const pi = { ...sm, ...msgs };
const entries = JSON.parse(readFileSync(process.argv[3], "utf8"));
pi.migrateSessionEntries(entries);
const chars = (m) => {
  const c = m.content;
  if (typeof c === "string") return [...c].length;
  let n = 0;
  for (const b of c ?? []) {
    if (typeof b.text === "string") n += [...b.text].length;
    else if (typeof b.thinking === "string") n += [...b.thinking].length;
    else if (b.type === "toolCall") n += [...b.name].length + [...JSON.stringify(b.arguments ?? {})].length;
  }
  return n;
};
const every = Number(process.argv[4] ?? 1);
const body = entries.filter((e) => e.type !== "session");
const out = [];
let afterCompaction = false;
for (let i = 0; i < body.length; i++) {
  const e = body[i];
  if (e.type === "compaction") afterCompaction = true;
  if (e.type !== "message" || e.message.role !== "assistant") continue;
  if (out.length % every !== 0 && !afterCompaction) {
    out.push(null);
    continue;
  }
  afterCompaction = false;
  const leaf = i > 0 ? body[i - 1].id : null;
  const ctx = pi.buildSessionContext(entries, leaf);
  const msgs = pi.convertToLlm(ctx.messages).filter((m) => m.role !== "system");
  // images are priced by their size in pixels on the Python side: not compared here
  const image = msgs.some((m) => Array.isArray(m.content) && m.content.some((b) => b.type === "image"));
  out.push(image ? null : msgs.reduce((a, m) => a + chars(m), 0));
}
process.stdout.write(JSON.stringify(out));
