import { classifyRenewalError, createLeaseClient, type Lease } from '@lease/client';
import { decodeEvent, type LeaseEvent, REPOSSESSOR_STATUS_SUBJECT, STREAM_NAME } from '@lease/events';
import { DeliverPolicy, jetstream } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNats } from '../../../test/harness/nats.js';
import { connectTest, eventually, startGateway, startRepossessor } from '../../../test/harness/services.js';
import { callGateway, resultOf } from '../../../test/harness/wire.js';

/** Every event of the log, in order, read straight from the stream. */
const readLog = async (nc: NatsConnection): Promise<{ seq: number; event: LeaseEvent }[]> => {
  const js = jetstream(nc);
  const info = await (await js.streams.get(STREAM_NAME)).info();
  const out: { seq: number; event: LeaseEvent }[] = [];
  if (info.state.last_seq === 0) return out;
  const consumer = await js.consumers.get(STREAM_NAME, { deliver_policy: DeliverPolicy.All });
  const messages = await consumer.consume({ max_messages: 4_096 });
  for await (const message of messages) {
    const decoded = decodeEvent(message.data);
    if (decoded.ok) out.push({ seq: message.seq, event: decoded.event });
    if (message.seq >= info.state.last_seq) break;
  }
  await messages.close();
  return out;
};

/** A client-side lease handle for a lease acquired over the raw wire protocol. */
const silentHandle = (acquired: { lease: Lease['view']; holderSecret?: string | undefined }): Lease => ({
  leaseId: acquired.lease.leaseId,
  fencingToken: acquired.lease.fencingToken,
  deadlineMs: acquired.lease.deadlineMs,
  holderSecret: acquired.holderSecret ?? '',
  view: acquired.lease,
  sentAtMonotonicMs: 0,
  ttlMs: acquired.lease.ttlMs,
  localDeadlineMonotonicMs: 0,
  replayed: false,
});

/** A gate a test opens by hand: the repossessor waits at it between deciding and appending. */
const gate = () => {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { open, opened };
};

const HOUR_MS = 3_600_000;

describe('the repossessor on a real nats-server', () => {
  let nats: Awaited<ReturnType<typeof startNats>>;
  let nc: NatsConnection;
  let gateway: Awaited<ReturnType<typeof startGateway>>;

  beforeAll(async () => {
    nats = await startNats();
    nc = await connectTest(nats.url);
    gateway = await startGateway(nats.url, { TTL_MIN_MS: '200' });
    resultOf(await callGateway(nc, 'defineLimit', { limit: 'gpu', slotsMax: 10 }));
  });
  afterAll(async () => {
    await gateway?.stop();
    await nc?.close();
    await nats?.stop();
  });

  for (const racer of ['renew', 'release'] as const) {
    it(`loses cleanly to a ${racer} appended after it decided and before it appended`, async () => {
      const limit = `race-${racer}`;
      resultOf(await callGateway(nc, 'defineLimit', { limit, slotsMax: 2 }));
      const { lease, holderSecret } = resultOf(
        await callGateway(nc, 'acquire', { requester: limit, slots: [{ limit, count: 2 }], ttlMs: 30_000 }),
      );
      const decided = gate();
      const proceed = gate();
      let attempts = 0;
      // Its clock runs an hour ahead, so the lease is past deadline + grace for it at once.
      const repossessor = await startRepossessor(
        nats.url,
        { GRACE_MS: '0' },
        {
          nowMs: () => Date.now() + HOUR_MS,
          hooks: {
            beforeAppend: async (leaseId) => {
              if (leaseId !== lease.leaseId) return;
              attempts += 1;
              // Only the first decision is raced; later ones (its clock is an hour ahead) are dropped.
              if (attempts > 1) throw new Error('the test lets one revocation through the hook');
              decided.open();
              await proceed.opened;
            },
          },
        },
      );
      try {
        await decided.opened;
        const raced = resultOf(await callGateway(nc, racer, { leaseId: lease.leaseId, holderSecret }));
        proceed.open();
        await eventually(() => repossessor.metrics.rejected === 1);
        const now = gateway.projection.state.leases.get(lease.leaseId)!;
        if (racer === 'renew') {
          expect(now).toMatchObject({ status: 'live', deadlineMs: raced.lease.deadlineMs, renewals: 1 });
          expect(gateway.projection.state.limits.get(limit)!.used).toBe(2);
        } else {
          expect(now.status).toBe('released');
          expect(gateway.projection.state.limits.get(limit)!.used).toBe(0);
        }
        const log = await readLog(nc);
        expect(
          log.some(({ event }) => event.type === 'LeaseRevoked' && event.leaseId === lease.leaseId),
        ).toBe(false);
        expect(gateway.projection.state.anomalyCount).toBe(0);
      } finally {
        await repossessor.stop();
      }
    });
  }

  it('unlocks a requester whose only lease went silent within deadline + grace + 1 s, and says why in the log', async () => {
    const graceMs = 300;
    const repossessor = await startRepossessor(nats.url, { GRACE_MS: String(graceMs), TICK_MS: '50' });
    try {
      const silent = resultOf(
        await callGateway(nc, 'acquire', {
          requester: 'lonely',
          holder: 'worker-a',
          slots: [{ limit: 'gpu', count: 1 }],
          ttlMs: 500,
        }),
      );
      const refused = await callGateway(nc, 'acquire', {
        requester: 'lonely',
        holder: 'worker-b',
        slots: [{ limit: 'gpu', count: 1 }],
        ttlMs: 5_000,
      });
      expect(refused).toMatchObject({ ok: false, error: { code: 'REQUESTER_LIMIT_REACHED' } });
      const granted = await eventually(
        async () => {
          const reply = await callGateway(nc, 'acquire', {
            requester: 'lonely',
            holder: 'worker-b',
            slots: [{ limit: 'gpu', count: 1 }],
            ttlMs: 5_000,
          });
          return reply.ok ? { at: Date.now(), reply } : undefined;
        },
        10_000,
        25,
      );
      expect(granted.at).toBeLessThanOrEqual(silent.lease.deadlineMs + graceMs + 1_000);
      const revocation = (await readLog(nc)).find(
        ({ event }) => event.type === 'LeaseRevoked' && event.leaseId === silent.lease.leaseId,
      );
      expect(revocation?.event).toMatchObject({
        reason: 'expired',
        deadlineMs: silent.lease.deadlineMs,
        decidedAgainstSeq: 0,
      });
      expect(
        await callGateway(nc, 'renew', { leaseId: silent.lease.leaseId, holderSecret: silent.holderSecret }),
      ).toMatchObject({
        ok: false,
        error: { code: 'LEASE_REVOKED', retryable: false },
      });
      // The SDK, renewing the same lease, takes that answer as the end of it.
      const client = createLeaseClient({ nc });
      const renewal = await client
        .renew({ ...silentHandle(silent), holderSecret: silent.holderSecret! })
        .catch((error: unknown) => error);
      expect(renewal).toMatchObject({ code: 'LEASE_REVOKED' });
      expect(classifyRenewalError(renewal)).toBe('lost');
      const stats = JSON.parse(
        new TextDecoder().decode((await nc.request(REPOSSESSOR_STATUS_SUBJECT, '')).data),
      );
      expect(stats).toMatchObject({ ready: true, failed: 0 });
      expect(stats.revoked).toBeGreaterThanOrEqual(1);
      expect(stats.lagP99Ms).toBeLessThan(1_000);
    } finally {
      await repossessor.stop();
    }
  });

  it('revokes leases that expired while it was stopped within 1 s of its start', async () => {
    const leases = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        callGateway(nc, 'acquire', {
          requester: `offline-${i}`,
          slots: [{ limit: 'gpu', count: 0 + 1 }],
          ttlMs: 200,
        }),
      ),
    ).catch(() => []);
    const granted = leases
      .filter((reply) => reply.ok)
      .map((reply) => (reply.ok ? reply.result.lease.leaseId : ''));
    expect(granted.length).toBeGreaterThan(0);
    await eventually(
      () =>
        Date.now() >
        Math.max(...granted.map((id) => gateway.projection.state.leases.get(id)!.deadlineMs)) + 100,
    );
    const startedAt = Date.now();
    const repossessor = await startRepossessor(nats.url, { GRACE_MS: '100', TICK_MS: '50' });
    try {
      await eventually(
        () => granted.every((id) => gateway.projection.state.leases.get(id)?.status === 'revoked'),
        5_000,
        10,
      );
      expect(Date.now() - startedAt).toBeLessThan(1_000);
    } finally {
      await repossessor.stop();
    }
  });
});

describe('two repossessors and 5,000 leases expiring together', () => {
  it('revoke every lease exactly once in the log', async () => {
    const nats = await startNats();
    const nc = await connectTest(nats.url);
    const gateway = await startGateway(nats.url, { TTL_MIN_MS: '100' });
    const repossessors: Awaited<ReturnType<typeof startRepossessor>>[] = [];
    try {
      resultOf(await callGateway(nc, 'defineLimit', { limit: 'pool', slotsMax: 5_000 }));
      const ids: string[] = [];
      const inFlight = 200;
      for (let start = 0; start < 5_000; start += inFlight) {
        const replies = await Promise.all(
          Array.from({ length: inFlight }, (_, i) =>
            callGateway(nc, 'acquire', {
              requester: `bulk-${start + i}`,
              slots: [{ limit: 'pool', count: 1 }],
              ttlMs: 3_000,
            }),
          ),
        );
        for (const reply of replies) ids.push(resultOf(reply).lease.leaseId);
      }
      repossessors.push(
        await startRepossessor(nats.url, { GRACE_MS: '0', SHARD: '0/2', TAKEOVER_MS: '0' }),
        await startRepossessor(nats.url, { GRACE_MS: '0', SHARD: '1/2', TAKEOVER_MS: '0' }),
      );
      await eventually(() => gateway.projection.state.limits.get('pool')!.used === 0, 30_000, 50);
      const revocations = (await readLog(nc)).filter(({ event }) => event.type === 'LeaseRevoked');
      const perLease = new Map<string, number>();
      for (const { event } of revocations)
        if (event.type === 'LeaseRevoked')
          perLease.set(event.leaseId, (perLease.get(event.leaseId) ?? 0) + 1);
      expect(perLease.size).toBe(5_000);
      expect([...perLease.values()].every((count) => count === 1)).toBe(true);
      expect(new Set(ids)).toEqual(new Set(perLease.keys()));
      expect(gateway.projection.state.anomalyCount).toBe(0);
    } finally {
      for (const repossessor of repossessors) await repossessor.stop();
      await gateway.stop();
      await nc.close();
      await nats.stop();
    }
  }, 120_000);
});
