import { appendEvent, ensureLeaseStream } from '@lease/bus';
import { type LeaseEvent, leaseSubject, STREAM_NAME } from '@lease/events';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Svcm } from '@nats-io/services';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNats } from '../../../test/harness/nats.js';
import { connectTest, eventually, startGateway } from '../../../test/harness/services.js';
import { callGateway, resultOf } from '../../../test/harness/wire.js';

const secret = (n: number | string) => `secret-${n}-0123456789abcdef`;

describe('the gateway on a real nats-server', () => {
  let nats: Awaited<ReturnType<typeof startNats>>;
  let nc: NatsConnection;
  let gateways: Awaited<ReturnType<typeof startGateway>>[] = [];

  beforeAll(async () => {
    nats = await startNats();
    nc = await connectTest(nats.url);
    gateways = [await startGateway(nats.url), await startGateway(nats.url)];
  });
  afterAll(async () => {
    for (const gateway of gateways) await gateway.stop();
    await nc?.close();
    await nats?.stop();
  });

  it('answers every malformed or invalid request with a typed, final error', async () => {
    expect(await callGateway(nc, 'acquire', '{"requester":')).toMatchObject({
      ok: false,
      error: { code: 'INVALID_REQUEST', retryable: false },
    });
    expect(await callGateway(nc, 'acquire', { requester: 'r', slots: [], ttlMs: 1000 })).toMatchObject({
      ok: false,
      error: { code: 'INVALID_REQUEST' },
    });
    const big = JSON.stringify({
      requester: 'r',
      slots: [{ limit: 'x', count: 1 }],
      ttlMs: 5000,
      metadata: { pad: 'x'.repeat(70_000) },
    });
    expect(await callGateway(nc, 'acquire', big)).toMatchObject({
      ok: false,
      error: { code: 'PAYLOAD_TOO_LARGE' },
    });
    expect(
      await callGateway(nc, 'acquire', { requester: 'r', slots: [{ limit: 'nope', count: 1 }], ttlMs: 5000 }),
    ).toMatchObject({
      ok: false,
      error: { code: 'UNKNOWN_LIMIT' },
    });
    expect(await callGateway(nc, 'renew', { leaseId: 'nope', holderSecret: secret(0) })).toMatchObject({
      ok: false,
      error: { code: 'UNKNOWN_LEASE' },
    });
  });

  it('grants exactly the slots a limit has to 200 concurrent acquires spread over two replicas', async () => {
    resultOf(await callGateway(nc, 'defineLimit', { limit: 'five', slotsMax: 5 }));
    const replies = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        callGateway(nc, 'acquire', {
          requester: `many-${i}`,
          slots: [{ limit: 'five', count: 1 }],
          ttlMs: 60_000,
          holderSecret: secret(i),
        }),
      ),
    );
    const granted = replies.filter((reply) => reply.ok);
    expect(granted).toHaveLength(5);
    expect(
      replies.filter((reply) => !reply.ok).every((reply) => !reply.ok && reply.error.code === 'NO_CAPACITY'),
    ).toBe(true);
    const tokens = granted.map((reply) => (reply.ok ? reply.result.lease.fencingToken : 0));
    expect(new Set(tokens).size).toBe(5);
    for (const gateway of gateways) {
      await eventually(() => gateway.projection.state.limits.get('five')?.used === 5);
      expect(gateway.projection.state.anomalyCount).toBe(0);
    }
  });

  it('refuses a second lease to a requester holding its one allowed lease, on either replica', async () => {
    resultOf(await callGateway(nc, 'defineLimit', { limit: 'wide', slotsMax: 100 }));
    resultOf(
      await callGateway(nc, 'acquire', {
        requester: 'solo',
        slots: [{ limit: 'wide', count: 1 }],
        ttlMs: 60_000,
      }),
    );
    const again = await Promise.all(
      Array.from({ length: 10 }, () =>
        callGateway(nc, 'acquire', {
          requester: 'solo',
          slots: [{ limit: 'wide', count: 1 }],
          ttlMs: 60_000,
        }),
      ),
    );
    for (const reply of again)
      expect(reply).toMatchObject({ ok: false, error: { code: 'REQUESTER_LIMIT_REACHED', retryable: true } });
    for (const gateway of gateways) expect(gateway.projection.state.liveByRequester.get('solo')).toBe(1);
  });

  it('renews, refuses a stranger, releases, and answers a late renewal with the final released code', async () => {
    const { lease, holderSecret } = resultOf(
      await callGateway(nc, 'acquire', {
        requester: 'cycle',
        slots: [{ limit: 'wide', count: 2 }],
        ttlMs: 10_000,
        metadata: { job: 'j-1' },
      }),
    );
    expect(lease).toMatchObject({ status: 'live', metadata: { job: 'j-1' } });
    const renewed = resultOf(
      await callGateway(nc, 'renew', { leaseId: lease.leaseId, holderSecret, ttlMs: 20_000 }),
    ).lease;
    expect(renewed.deadlineMs).toBeGreaterThan(lease.deadlineMs);
    expect(
      await callGateway(nc, 'renew', { leaseId: lease.leaseId, holderSecret: secret('stranger') }),
    ).toMatchObject({
      ok: false,
      error: { code: 'FORBIDDEN' },
    });
    expect(await callGateway(nc, 'renew', { leaseId: lease.leaseId, holderSecret, ttlMs: 10 })).toMatchObject(
      {
        ok: false,
        error: { code: 'TTL_OUT_OF_RANGE' },
      },
    );
    expect(
      resultOf(await callGateway(nc, 'release', { leaseId: lease.leaseId, holderSecret })).lease.status,
    ).toBe('released');
    expect(await callGateway(nc, 'renew', { leaseId: lease.leaseId, holderSecret })).toMatchObject({
      ok: false,
      error: { code: 'LEASE_RELEASED', retryable: false },
    });
  });

  it('renews many leases in one request, each as if alone: its own event on its own subject, its own answer', async () => {
    const leases = [];
    for (let i = 0; i < 3; i++)
      leases.push(
        resultOf(
          await callGateway(nc, 'acquire', {
            requester: `batch-${i}`,
            slots: [{ limit: 'wide', count: 1 }],
            ttlMs: 10_000,
            holderSecret: secret(`batch-${i}`),
          }),
        ).lease,
      );
    const [a, b, c] = leases as [(typeof leases)[0], (typeof leases)[0], (typeof leases)[0]];
    resultOf(await callGateway(nc, 'release', { leaseId: c.leaseId, holderSecret: secret('batch-2') }));
    const reply = resultOf(
      await callGateway(nc, 'renewMany', {
        renewals: [
          { leaseId: a.leaseId, holderSecret: secret('batch-0'), ttlMs: 20_000 },
          { leaseId: b.leaseId, holderSecret: secret('stranger') },
          { leaseId: c.leaseId, holderSecret: secret('batch-2') },
          { leaseId: 'no-such-lease', holderSecret: secret('batch-0') },
          { leaseId: b.leaseId.replace(/.$/, '_'), holderSecret: secret('batch-1') },
        ],
      }),
    );
    expect(reply.results.map((r) => (r.ok ? 'ok' : r.error.code))).toEqual([
      'ok',
      'FORBIDDEN',
      'LEASE_RELEASED',
      'UNKNOWN_LEASE',
      'UNKNOWN_LEASE',
    ]);
    const renewed = reply.results[0];
    expect(renewed?.ok && renewed.lease).toMatchObject({ leaseId: a.leaseId, renewals: 1, ttlMs: 20_000 });
    // The renewal is an ordinary LeaseRenewed on the lease's own subject, right after its grant.
    const stored = await (await jetstreamManager(nc)).streams.getMessage(STREAM_NAME, {
      last_by_subj: leaseSubject(a.leaseId),
    });
    expect(JSON.parse(new TextDecoder().decode(stored!.data))).toMatchObject({
      type: 'LeaseRenewed',
      leaseId: a.leaseId,
      ttlMs: 20_000,
    });
    expect(renewed?.ok && renewed.lease.lastSubjectSeq).toBe(stored!.seq);

    const twice = await callGateway(nc, 'renewMany', {
      renewals: [
        { leaseId: a.leaseId, holderSecret: secret('batch-0') },
        { leaseId: a.leaseId, holderSecret: secret('batch-0') },
      ],
    });
    expect(twice).toMatchObject({ ok: false, error: { code: 'INVALID_REQUEST', retryable: false } });
    const tooMany = await callGateway(nc, 'renewMany', {
      renewals: Array.from({ length: 257 }, (_, i) => ({ leaseId: `l-${i}`, holderSecret: secret(i) })),
    });
    expect(tooMany).toMatchObject({ ok: false, error: { code: 'INVALID_REQUEST' } });
    expect(await callGateway(nc, 'renewMany', { renewals: [] })).toMatchObject({
      ok: false,
      error: { code: 'INVALID_REQUEST' },
    });
  });

  it('refuses a renewal that arrives after the deadline as expired, a final answer', async () => {
    const { lease, holderSecret } = resultOf(
      await callGateway(nc, 'acquire', {
        requester: 'late',
        slots: [{ limit: 'wide', count: 1 }],
        ttlMs: 1_000,
      }),
    );
    await eventually(() => Date.now() > lease.deadlineMs + 20, 5_000);
    expect(await callGateway(nc, 'renew', { leaseId: lease.leaseId, holderSecret })).toMatchObject({
      ok: false,
      error: { code: 'LEASE_EXPIRED', retryable: false },
    });
  });

  it('lets an admin revoke a lease, after which its holder hears the final revoked code', async () => {
    const { lease, holderSecret } = resultOf(
      await callGateway(nc, 'acquire', {
        requester: 'victim',
        slots: [{ limit: 'wide', count: 1 }],
        ttlMs: 30_000,
      }),
    );
    const revoked = resultOf(
      await callGateway(nc, 'revoke', {
        leaseId: lease.leaseId,
        reason: 'admin',
        actor: 'ops',
        detail: 'maintenance',
      }),
    );
    expect(revoked.lease).toMatchObject({ status: 'revoked', revokeReason: 'admin' });
    expect(await callGateway(nc, 'renew', { leaseId: lease.leaseId, holderSecret })).toMatchObject({
      ok: false,
      error: { code: 'LEASE_REVOKED' },
    });
  });

  it('refuses a caller-chosen lease id in use, slots beyond a limit, and oversize metadata', async () => {
    resultOf(
      await callGateway(nc, 'acquire', {
        requester: 'chooser',
        leaseId: 'chosen-1',
        slots: [{ limit: 'wide', count: 1 }],
        ttlMs: 30_000,
      }),
    );
    const reuse = {
      requester: 'chooser-2',
      leaseId: 'chosen-1',
      slots: [{ limit: 'wide', count: 1 }],
      ttlMs: 30_000,
    };
    expect(await callGateway(nc, 'acquire', reuse)).toMatchObject({
      ok: false,
      error: { code: 'LEASE_ID_IN_USE' },
    });
    const tooMany = { requester: 'greedy', slots: [{ limit: 'wide', count: 101 }], ttlMs: 30_000 };
    expect(await callGateway(nc, 'acquire', tooMany)).toMatchObject({
      ok: false,
      error: { code: 'SLOTS_EXCEED_LIMIT' },
    });
    const fat = {
      requester: 'fat',
      slots: [{ limit: 'wide', count: 1 }],
      ttlMs: 30_000,
      metadata: { pad: 'x'.repeat(4_000) },
    };
    expect(await callGateway(nc, 'acquire', fat)).toMatchObject({
      ok: false,
      error: { code: 'METADATA_TOO_LARGE' },
    });
  });

  it('manages limits and requester limits, refusing changes that live leases forbid', async () => {
    expect(resultOf(await callGateway(nc, 'defineLimit', { limit: 'tmp', slotsMax: 2 })).limit).toMatchObject(
      {
        slotsMax: 2,
        used: 0,
      },
    );
    resultOf(
      await callGateway(nc, 'acquire', {
        requester: 'tmp-user',
        slots: [{ limit: 'tmp', count: 2 }],
        ttlMs: 30_000,
      }),
    );
    expect(await callGateway(nc, 'defineLimit', { limit: 'tmp', slotsMax: 1 })).toMatchObject({
      ok: false,
      error: { code: 'LIMIT_IN_USE' },
    });
    expect(await callGateway(nc, 'removeLimit', { limit: 'tmp' })).toMatchObject({
      ok: false,
      error: { code: 'LIMIT_IN_USE' },
    });
    expect(await callGateway(nc, 'removeLimit', { limit: 'never' })).toMatchObject({
      ok: false,
      error: { code: 'UNKNOWN_LIMIT' },
    });
    resultOf(await callGateway(nc, 'setRequesterLimit', { requester: 'tmp-user', leasesMax: 3 }));
    const listed = resultOf(await callGateway(nc, 'listLimits', {}));
    expect(listed.requesterLimits).toMatchObject({ 'tmp-user': 3 });
    expect(listed.limits.find((l: { limit: string }) => l.limit === 'tmp')).toMatchObject({
      used: 2,
      free: 0,
    });
    const mine = resultOf(await callGateway(nc, 'list', { requester: 'tmp-user' }));
    expect(mine).toMatchObject({ total: 1, truncated: false });
  });

  it('returns the original lease for a replayed idempotency key, also from a freshly started replica', async () => {
    const body = {
      requester: 'idem',
      slots: [{ limit: 'wide', count: 1 }],
      ttlMs: 30_000,
      idempotencyKey: 'job-42',
      holderSecret: secret('idem'),
    };
    const first = resultOf(await callGateway(nc, 'acquire', body));
    const fresh = await startGateway(nats.url);
    gateways.push(fresh);
    for (let i = 0; i < 4; i++) {
      const again = resultOf(await callGateway(nc, 'acquire', body));
      expect(again).toMatchObject({
        replayed: true,
        holderSecret: first.holderSecret,
        lease: { leaseId: first.lease.leaseId },
      });
    }
    const other = await callGateway(nc, 'acquire', { ...body, slots: [{ limit: 'wide', count: 2 }] });
    expect(other).toMatchObject({ ok: false, error: { code: 'IDEMPOTENCY_KEY_REUSED' } });
    expect(fresh.projection.state.liveByRequester.get('idem')).toBe(1);
  });

  it('stores a retried append once when it carries the same message id (an uncertain publish retried)', async () => {
    const js = jetstream(nc);
    const jsm = await jetstreamManager(nc);
    await ensureLeaseStream(nc);
    const before = (await jsm.streams.info(STREAM_NAME)).state.last_seq;
    const event: LeaseEvent = { type: 'LimitDefined', v: 1, atMs: Date.now(), limit: 'dedup', slotsMax: 1 };
    const admissionSeq = gateways[0]!.projection.state.admissionSeq;
    const first = await appendEvent(js, event, { expectedLastSubjectSeq: admissionSeq, msgId: 'retry-me' });
    const retry = await appendEvent(js, event, { expectedLastSubjectSeq: admissionSeq, msgId: 'retry-me' });
    expect(first).toMatchObject({ ok: true, duplicate: false });
    expect(retry).toMatchObject({ ok: true, duplicate: true });
    expect((await jsm.streams.info(STREAM_NAME)).state.last_seq).toBe(before + 1);
  });

  it('reports its counters through the NATS services protocol, from every replica', async () => {
    const replies = await new Svcm(nc).client({ strategy: 'timer', maxWait: 1_000 }).stats('lease-gateway');
    type Counters = { ready: boolean; anomalies: number; grants: number; rejections: Record<string, number> };
    const all: { name: string; endpoints: { data: Counters }[] }[] = [];
    for await (const reply of replies) all.push(reply as never);
    expect(all).toHaveLength(gateways.length);
    const data = all.map((reply) => reply.endpoints[0]!.data);
    for (const one of data) expect(one).toMatchObject({ ready: true, anomalies: 0 });
    expect(data.reduce((sum, one) => sum + one.grants, 0)).toBeGreaterThanOrEqual(5);
    expect(data.reduce((sum, one) => sum + (one.rejections.INVALID_REQUEST ?? 0), 0)).toBeGreaterThan(0);
  });
});
