// Helper for test_edits_cross.py: reads [{messages, seen, edits}] on stdin and prints
// [{tail, sent}] computed by edits.ts, so Python can compare on generated inputs.
import { readFileSync } from "node:fs";
import { applyEdits, describeTail } from "../../../ctxwrap/_bridge/edits.ts";

interface In {
  messages: unknown[];
  seen: string[];
  edits: unknown[];
}
const cases = JSON.parse(readFileSync(0, "utf8")) as In[];
const out = cases.map((c) => ({
  tail: describeTail(c.messages, new Set(c.seen)),
  sent: applyEdits(c.messages, c.edits),
}));
process.stdout.write(JSON.stringify(out));
