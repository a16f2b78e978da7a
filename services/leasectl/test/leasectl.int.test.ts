import { ensureLeaseStream } from '@lease/bus';
import { createLeaseClient, type LeaseClient } from '@lease/client';
import {
  ADMISSION_SUBJECT,
  encodeEvent,
  type Grant,
  type LeaseEvent,
  leaseSubject,
  leaseView,
  limitViews,
  type Snapshot,
  STREAM_NAME,
  snapshotOf,
  stateFromSnapshot,
} from '@lease/events';
import { type JetStreamClient, jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type NatsServerHandle, startNats } from '../../../test/harness/nats.js';
import { connectTest, eventually, startGateway } from '../../../test/harness/services.js';
import { EXIT, runLeasectl } from '../src/index.js';

/** Runs one leasectl command line in this process, against `url`, capturing its output. */
const leasectl = async (url: string, ...argv: string[]) => {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runLeasectl(argv, {
    out: (line) => out.push(line),
    err: (line) => err.push(line),
    errIsTTY: false,
    env: { NATS_URL: url, LEASECTL_ACTOR: 'test-admin' },
  });
  return { code, out: out.join('\n'), err: err.join('\n'), json: () => JSON.parse(out.join('\n')) };
};

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('leasectl against a live gateway', () => {
  let nats: NatsServerHandle;
  let nc: NatsConnection;
  let gateway: Awaited<ReturnType<typeof startGateway>>;
  let client: LeaseClient;

  beforeAll(async () => {
    nats = await startNats();
    nc = await connectTest(nats.url);
    gateway = await startGateway(nats.url);
    client = createLeaseClient({ nc });
  });
  afterAll(async () => {
    await gateway?.stop();
    await nc?.close();
    await nats?.stop();
  });

  const folded = async () => {
    const last = (await (await jetstreamManager(nc)).streams.info(STREAM_NAME)).state.last_seq;
    await eventually(() => gateway.projection.state.lastSeq >= last);
    return last;
  };

  it('replays to the exact state the live gateway had at a sequence, and at a time', async () => {
    await client.defineLimit({ limit: 'gpu', slotsMax: 4 });
    await client.defineLimit({ limit: 'cpu', slotsMax: 8 });
    await client.setRequesterLimit({ requester: '*', leasesMax: 3 });
    const a = await client.acquire({
      requester: 'team-a',
      holder: 'h1',
      slots: [{ limit: 'gpu', count: 2 }],
      ttlMs: 60_000,
    });
    const b = await client.acquire({
      requester: 'team-b',
      slots: [{ limit: 'cpu', count: 3 }],
      ttlMs: 60_000,
    });
    await client.renew(a);
    await client.release(b);
    const c = await client.acquire({
      requester: 'team-a',
      slots: [{ limit: 'cpu', count: 1 }],
      ttlMs: 60_000,
    });
    const atSeq = await folded();
    const then: Snapshot = JSON.parse(JSON.stringify(snapshotOf(gateway.projection.state)));
    const atTime = (await (await jetstreamManager(nc)).direct.getMessage(STREAM_NAME, { seq: atSeq }))!.time;
    await sleep(5);

    // More history after the point.
    await client.revoke({ leaseId: c.leaseId, reason: 'admin', actor: 'ops', detail: 'test' });
    await client.defineLimit({ limit: 'gpu', slotsMax: 6 });
    await client.acquire({ requester: 'team-c', slots: [{ limit: 'gpu', count: 1 }], ttlMs: 60_000 });
    await folded();

    const restored = stateFromSnapshot(then);
    if (!restored.ok) throw new Error(restored.message);
    const expectedLeases = [...restored.state.leases.values()]
      .filter((lease) => lease.status === 'live')
      .sort((x, y) => x.grantSeq - y.grantSeq)
      .map(leaseView);
    for (const at of [String(atSeq), atTime.toISOString()]) {
      const run = await leasectl(nats.url, '--json', 'replay', '--at', at);
      expect(run.code, run.err).toBe(EXIT.ok);
      const replayed = run.json();
      expect(replayed.foldedSeq).toBe(atSeq);
      expect(replayed.limits).toEqual(limitViews(restored.state));
      expect(replayed.leases).toEqual(expectedLeases);
      expect(replayed.requesterLimits).toEqual(Object.fromEntries(then.requesterLimits));
      expect(replayed.defaultLeasesPerRequester).toBe(3);
    }
    expect(expectedLeases.map((lease) => lease.leaseId).sort()).toEqual([a.leaseId, c.leaseId].sort());

    const human = await leasectl(nats.url, 'replay', '--at', String(atSeq));
    expect(human.code).toBe(EXIT.ok);
    expect(human.out).toContain(`folded up to seq ${atSeq}`);
    expect(human.out).toMatch(/gpu\s+4\s+2\s+2/);
  });

  it('passes the audit on a log written by real gateway traffic', async () => {
    const run = await leasectl(nats.url, '--json', 'audit');
    expect(run.code, run.out).toBe(EXIT.ok);
    const report = run.json();
    expect(report).toMatchObject({ ok: true, findingCount: 0, undecodable: 0, findings: [] });
    expect(report.events).toBe(await folded());
  });

  it("shows a lease's whole history with sequences, actors and reasons", async () => {
    await client.defineLimit({ limit: 'hist', slotsMax: 1 });
    const lease = await client.acquire({
      requester: 'team-h',
      slots: [{ limit: 'hist', count: 1 }],
      ttlMs: 60_000,
    });
    await client.renew(lease);
    await client.revoke({ leaseId: lease.leaseId, reason: 'admin', actor: 'ops', detail: 'maintenance' });
    const run = await leasectl(nats.url, '--json', 'lease', lease.leaseId);
    expect(run.code, run.err).toBe(EXIT.ok);
    const shown = run.json();
    expect(shown.lease).toMatchObject({ leaseId: lease.leaseId, status: 'revoked', revokeReason: 'admin' });
    const texts: string[] = shown.history.map((h: { text: string }) => h.text);
    expect(texts).toHaveLength(3);
    expect(texts[0]).toMatch(
      new RegExp(`seq ${lease.view.grantSeq}  -  granted: requester team-h, slots histx1`),
    );
    expect(texts[1]).toMatch(/renewed: ttl 60000 ms/);
    expect(texts[2]).toMatch(
      /ops {2}revoked: admin, deadline \d\d:\d\d:\d\d\.\d{3}, decided against seq \d+, maintenance/,
    );

    const unknown = await leasectl(nats.url, 'lease', 'no-such-lease');
    expect(unknown.code).toBe(EXIT.failed);
    expect(unknown.err).toContain('UNKNOWN_LEASE');
  });

  it('shows the queueing of a lease that waited, and the whole life of a waiter that never got one', async () => {
    await client.defineLimit({ limit: 'queue', slotsMax: 1 });
    const first = await client.acquire({
      requester: 'q-1',
      slots: [{ limit: 'queue', count: 1 }],
      ttlMs: 60_000,
    });
    const waiting = client.acquire({
      requester: 'q-2',
      slots: [{ limit: 'queue', count: 1 }],
      ttlMs: 60_000,
      waitMs: 10_000,
      leaseId: 'waited-lease',
    });
    await eventually(() => gateway.projection.state.waiters.has('waited-lease'));
    await client.release(first);
    const waited = await waiting;
    const run = await leasectl(nats.url, '--json', 'lease', waited.leaseId);
    expect(run.code, run.err).toBe(EXIT.ok);
    const kinds = run.json().history.map((h: { event: { type: string } }) => h.event.type);
    expect(kinds).toEqual(['AcquiresQueued', 'LeasesGranted']);
    expect(run.json().history[0].text).toMatch(/queued for slots/);

    await expect(
      client.acquire({
        requester: 'q-3',
        slots: [{ limit: 'queue', count: 1 }],
        ttlMs: 60_000,
        waitMs: 300,
        leaseId: 'never-granted',
      }),
    ).rejects.toMatchObject({ code: 'WAIT_TIMEOUT' });
    const never = await leasectl(nats.url, 'lease', 'never-granted');
    expect(never.code, never.err).toBe(EXIT.ok);
    expect(never.out).toMatch(/queued for slots[\s\S]*wait ended: timed-out/);
    await client.release(waited);
  });

  it('lists, sets and removes limits, lists leases, revokes as an admin, and reports status', async () => {
    expect((await leasectl(nats.url, 'limits', 'set', 'tmp', '3')).code).toBe(EXIT.ok);
    const listed = await leasectl(nats.url, '--json', 'limits', 'list');
    expect(listed.json().limits).toContainEqual({ limit: 'tmp', slotsMax: 3, used: 0, free: 3 });
    const removed = await leasectl(nats.url, 'limits', 'remove', 'tmp');
    expect(removed.code, removed.err).toBe(EXIT.ok);
    const inUse = await leasectl(nats.url, 'limits', 'remove', 'gpu');
    expect(inUse.code).toBe(EXIT.failed);
    expect(inUse.err).toContain('LIMIT_IN_USE');

    const lease = await client.acquire({
      requester: 'team-r',
      slots: [{ limit: 'cpu', count: 1 }],
      ttlMs: 60_000,
    });
    const leases = await leasectl(nats.url, '--json', 'leases', '--requester', 'team-r');
    expect(leases.json().leases.map((l: { leaseId: string }) => l.leaseId)).toEqual([lease.leaseId]);
    const revoked = await leasectl(nats.url, '--json', 'revoke', lease.leaseId, '--reason', 'stuck job');
    expect(revoked.code, revoked.err).toBe(EXIT.ok);
    expect(revoked.json().lease).toMatchObject({ status: 'revoked', revokeReason: 'admin' });
    const history = await leasectl(nats.url, 'lease', lease.leaseId);
    expect(history.out).toMatch(/test-admin {2}revoked: admin, .*stuck job/);

    const status = await leasectl(nats.url, '--json', 'status');
    expect(status.code, status.err).toBe(EXIT.ok);
    const report = status.json();
    const lastSeq = await folded();
    expect(report.stream.lastSeq).toBe(lastSeq);
    expect(report.limits).toContainEqual(expect.objectContaining({ limit: 'gpu', liveLeases: 2 }));
    expect(report.replicas).toEqual([
      expect.objectContaining({ service: 'lease-gateway', ready: true, foldedSeq: lastSeq, lag: 0 }),
    ]);

    expect((await leasectl(nats.url, 'revoke', lease.leaseId)).code).toBe(EXIT.usage);
    expect((await leasectl(nats.url, 'lease', 'bad.id')).code).toBe(EXIT.usage);
    expect((await leasectl(nats.url, 'nonsense')).code).toBe(EXIT.usage);
  });

  it('exports a range as JSON lines and as CSV, and tails with filters from a sequence', async () => {
    const jsonl = await leasectl(nats.url, 'export', '--from', '2', '--to', '4');
    expect(jsonl.code).toBe(EXIT.ok);
    const lines = jsonl.out.split('\n').map((line) => JSON.parse(line));
    expect(lines.map((line) => line.seq)).toEqual([2, 3, 4]);
    expect(lines[0].event).toMatchObject({ type: 'LimitDefined', limit: 'cpu' });
    const csv = await leasectl(nats.url, 'export', '--to', '2', '--format', 'csv');
    expect(csv.out.split('\n')).toEqual([
      'seq,time,subject,type,atMs,actor,leaseId,event',
      expect.stringMatching(/^1,.*,lease\.events\.admission,LimitDefined,\d+,,,"\{""type"":""LimitDefined""/),
      expect.stringMatching(/^2,/),
    ]);

    const tail = await leasectl(
      nats.url,
      '--json',
      'tail',
      '--from',
      'start',
      '--requester',
      'team-a',
      '--count',
      '3',
    );
    expect(tail.code, tail.err).toBe(EXIT.ok);
    const events = tail.out.split('\n').map((line) => JSON.parse(line).event.type);
    // The default requester limit ('*') applies to team-a too, then its grant and renewal.
    expect(events).toEqual(['RequesterLimitSet', 'LeasesGranted', 'LeaseRenewed']);

    let tailed: Awaited<ReturnType<typeof leasectl>> | undefined;
    const live = leasectl(nats.url, '--json', 'tail', '--type', 'LimitDefined', '--count', '1').then(
      (run) => {
        tailed = run;
      },
    );
    // The tail starts at "now" once it has connected: define limits until it has seen one (bounded).
    for (let i = 0; i < 50 && tailed === undefined; i++) {
      await client.defineLimit({ limit: `late-${i}`, slotsMax: 1 });
      await sleep(200);
    }
    await live;
    expect(JSON.parse(tailed!.out).event).toMatchObject({
      type: 'LimitDefined',
      limit: expect.stringMatching(/^late-/),
    });
  });
});

const SECRET_HASH = 'c'.repeat(64);
const grantEvent = (
  leaseId: string,
  requester: string,
  limit: string,
  count: number,
  fencingToken: number,
): LeaseEvent => ({
  type: 'LeasesGranted',
  v: 1,
  atMs: Date.now(),
  grants: [
    {
      leaseId,
      requester,
      slots: [{ limit, count }],
      ttlMs: 60_000,
      deadlineMs: Date.now() + 60_000,
      fencingToken,
      secretHash: SECRET_HASH,
    } satisfies Grant,
  ],
});

/** Appends straight to the stream, around the gateway: what a broken writer could do. */
const inject = async (js: JetStreamClient, subject: string, data: LeaseEvent | string) =>
  (await js.publish(subject, typeof data === 'string' ? data : encodeEvent(data))).seq;

describe('leasectl audit on a log with violations injected around the gateway', () => {
  let nats: NatsServerHandle;
  let nc: NatsConnection;
  const expected: [number, string][] = [];

  beforeAll(async () => {
    nats = await startNats();
    nc = await connectTest(nats.url);
    await ensureLeaseStream(nc);
    const js = jetstream(nc);
    const now = Date.now();
    await inject(js, ADMISSION_SUBJECT, { type: 'LimitDefined', v: 1, atMs: now, limit: 'gpu', slotsMax: 2 });
    await inject(js, ADMISSION_SUBJECT, {
      type: 'LimitDefined',
      v: 1,
      atMs: now,
      limit: 'cpu',
      slotsMax: 10,
    });
    await inject(js, ADMISSION_SUBJECT, grantEvent('a', 'r1', 'gpu', 2, 1));
    expected.push([
      await inject(js, ADMISSION_SUBJECT, grantEvent('b', 'r2', 'gpu', 1, 2)),
      'OVERSUBSCRIBED',
    ]);
    expected.push([
      await inject(js, ADMISSION_SUBJECT, grantEvent('c', 'r1', 'cpu', 1, 3)),
      'REQUESTER_OVER_LIMIT',
    ]);
    await inject(js, ADMISSION_SUBJECT, grantEvent('e', 'r3', 'cpu', 1, 5));
    expected.push([
      await inject(js, ADMISSION_SUBJECT, grantEvent('f', 'r4', 'cpu', 1, 4)),
      'FENCING_NOT_GROWING',
    ]);
    await inject(js, leaseSubject('a'), {
      type: 'LeaseRenewed',
      v: 1,
      atMs: now,
      leaseId: 'a',
      ttlMs: 60_000,
      deadlineMs: now + 60_000,
    });
    expected.push([
      await inject(js, leaseSubject('a'), {
        type: 'LeaseRevoked',
        v: 1,
        atMs: now,
        leaseId: 'a',
        reason: 'expired',
        deadlineMs: now,
        decidedAgainstSeq: 0,
      }),
      'STALE_REVOCATION',
    ]);
    await inject(js, leaseSubject('e'), { type: 'LeaseReleased', v: 1, atMs: now, leaseId: 'e' });
    expected.push([
      await inject(js, leaseSubject('e'), {
        type: 'LeaseRenewed',
        v: 1,
        atMs: now,
        leaseId: 'e',
        ttlMs: 60_000,
        deadlineMs: now + 60_000,
      }),
      'AFTER_END',
    ]);
    expected.push([await inject(js, leaseSubject('zz'), '{"type": "LeaseRenewed", not json'), 'UNDECODABLE']);
    expected.push([
      await inject(js, ADMISSION_SUBJECT, JSON.stringify({ type: 'LeaseTeleported', v: 1, atMs: now })),
      'UNDECODABLE',
    ]);
    await inject(js, ADMISSION_SUBJECT, { type: 'LimitDefined', v: 1, atMs: now, limit: 'mem', slotsMax: 1 });
  });
  afterAll(async () => {
    await nc?.close();
    await nats?.stop();
  });

  it('exits 1 and names the sequence and kind of every violation, counting undecodable messages', async () => {
    const run = await leasectl(nats.url, '--json', 'audit');
    expect(run.code).toBe(EXIT.failed);
    const report = run.json();
    expect(report.ok).toBe(false);
    expect(report.findings.map((f: { seq: number; kind: string }) => [f.seq, f.kind])).toEqual(expected);
    expect(
      report.findings
        .filter((f: { problem?: string }) => f.problem)
        .map((f: { problem: string }) => f.problem),
    ).toEqual(['corrupt', 'unknown-type']);
    expect(report).toMatchObject({ events: 12, undecodable: 2, findingCount: 7, lastSeq: 14 });

    const human = await leasectl(nats.url, 'audit');
    expect(human.code).toBe(EXIT.failed);
    const lines = human.out.split('\n');
    for (const [seq, kind] of expected)
      expect(lines.some((line) => line.startsWith(`seq ${seq} ${kind}`))).toBe(true);
    expect(lines.at(-1)).toMatch(
      /^audit FAILED: 12 events and 2 undecodable messages up to seq 14, 7 violations/,
    );
  });

  it('replays, exports and tails past the undecodable messages without failing', async () => {
    const replay = await leasectl(nats.url, '--json', 'replay', '--at', '14');
    expect(replay.code).toBe(EXIT.ok);
    expect(replay.json()).toMatchObject({ foldedSeq: 14, anomalyCount: 5 });
    expect(replay.json().limits.map((l: { limit: string }) => l.limit)).toEqual(['cpu', 'gpu', 'mem']);

    const exported = await leasectl(nats.url, 'export');
    expect(exported.code).toBe(EXIT.ok);
    expect(exported.out.split('\n')).toHaveLength(12);
    expect(exported.err).toContain('2 undecodable messages were not exported');

    const tail = await leasectl(nats.url, 'tail', '--from', '11', '--count', '2');
    expect(tail.code).toBe(EXIT.ok);
    expect(tail.out).toMatch(/seq 11 {2}LeaseRenewed/);
    expect(tail.out).toMatch(/seq 14 {2}LimitDefined/);
    expect(tail.err).toMatch(/seq 12 .*corrupt/);
  });
});
