// The bridge's statistics outbox and aux budget (issue 12, findings 7 and 9), with a fake
// transport: records survive a daemon that does not answer, go out in order, and only what
// falls off the bounded queue or is refused counts as lost. The end-to-end versions (real pi,
// a crash-looping daemon, a slow aux model) are in tests/e2e/test_faults.py.
// Run: node --test tests/node/

import assert from "node:assert/strict";
import { test } from "node:test";

import { StatsOutbox, auxWaitMs } from "../../ctxwrap/_bridge/ctxwrap-bridge.ts";

type Sent = { path: string; body: any };

function transport(statuses: number[]) {
  const sent: Sent[] = [];
  const send = async (path: string, body: unknown) => {
    const status = statuses.length ? statuses.shift()! : 200;
    if (status === 200) sent.push({ path, body });
    return { status, value: status === 200 ? { ok: true } : null };
  };
  return { sent, send };
}

test("records wait for the daemon and go out in order", async () => {
  const t = transport([0, 0]); // daemon away for the first two tries
  const box = new StatsOutbox(t.send, 10, 60_000);
  box.push("/v1/llm_call", { i: 0 });
  await box.flush();
  box.push("/v1/llm_call", { i: 1 });
  await box.flush();
  assert.equal(box.pending, 2);
  assert.deepEqual(t.sent, []);
  box.push("/v1/turn_end", { i: 2 });
  await box.flush();
  assert.equal(box.pending, 0);
  assert.equal(box.lost, 0);
  assert.deepEqual(
    t.sent.map((s) => s.body.i),
    [0, 1, 2],
  );
  box.close();
});

test("a 5xx or 409 keeps the record; a 4xx refusal counts it lost", async () => {
  const t = transport([503, 409, 422]);
  const box = new StatsOutbox(t.send, 10, 60_000);
  box.push("/v1/llm_call", { i: 0 });
  await box.flush(); // 503: kept
  await box.flush(); // 409: kept
  assert.equal(box.pending, 1);
  await box.flush(); // 422: dropped, counted
  assert.equal(box.pending, 0);
  assert.equal(box.lost, 1);
  box.close();
});

test("the queue is bounded: the oldest record falls off and is counted", async () => {
  const t = transport(Array(100).fill(0));
  const box = new StatsOutbox(t.send, 3, 60_000);
  for (let i = 0; i < 5; i++) box.push("/v1/llm_call", { i });
  await box.flush();
  assert.equal(box.pending, 3);
  assert.equal(box.lost, 2);
  box.close();
});

test("the reply reaches its callback (turn_end totals, reloaded config)", async () => {
  const t = transport([]);
  const box = new StatsOutbox(t.send, 3, 60_000);
  let got: unknown = null;
  box.push("/v1/turn_end", { i: 0 }, (reply) => (got = reply));
  await box.flush();
  assert.deepEqual(got, { ok: true });
  box.close();
});

test("each record has an id of its own, the same on every try", async () => {
  const tries: any[] = [];
  let answer = 0; // no answer at first: the daemon stored it but was killed before replying
  const send = async (path: string, body: any) => {
    tries.push(body);
    return answer ? { status: 200, value: { ok: true } } : { status: 0, value: null };
  };
  const box = new StatsOutbox(send, 10, 60_000);
  box.push("/v1/llm_call", { i: 0 });
  await box.flush();
  answer = 200;
  box.push("/v1/turn_end", { i: 1 });
  await box.flush();
  assert.deepEqual(
    tries.map((b) => b.i),
    [0, 0, 1],
  );
  assert.equal(tries[0].record_id, tries[1].record_id); // the repeat the daemon drops
  assert.notEqual(tries[1].record_id, tries[2].record_id);
  const other = new StatsOutbox(send, 10, 60_000); // a resumed session's bridge
  other.push("/v1/llm_call", { i: 0 });
  await other.flush();
  assert.notEqual(tries[3].record_id, tries[0].record_id);
  box.close();
  other.close();
});

test("aux calls share the round's budget", () => {
  const now = 1_000_000;
  assert.equal(auxWaitMs(20_000, now + 20_000, now), 20_000);
  assert.equal(auxWaitMs(20_000, now + 5_000, now), 5_000); // what the round has left
  assert.equal(auxWaitMs(20_000, now - 1, now), 0); // spent: do not run it
});
