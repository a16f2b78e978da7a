import { ensureLeaseStream } from '@lease/bus';
import { createLeaseClient, type Lease, withLease } from '@lease/client';
import { ADMISSION_SUBJECT, encodeEvent, type LeaseEvent, leaseSubject } from '@lease/events';
import { jetstream } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterEach, describe, expect, it } from 'vitest';
import { startNats } from '../harness/nats.js';
import { type ServiceProcess, startService } from '../harness/processes.js';
import { connectTest, eventually } from '../harness/services.js';

const SECRET_HASH = 'c'.repeat(64);

/**
 * Grows the log with `leases` grant+release pairs, written straight to the stream the way
 * the gateway writes them, pipelined (256 in flight): history the gateway must replay.
 */
const growHistory = async (nc: NatsConnection, leases: number) => {
  await ensureLeaseStream(nc);
  const js = jetstream(nc);
  const now = Date.now();
  await js.publish(
    ADMISSION_SUBJECT,
    encodeEvent({ type: 'LimitDefined', v: 1, atMs: now, limit: 'history', slotsMax: 1_000 }),
  );
  const events: { subject: string; event: LeaseEvent }[] = [];
  for (let i = 0; i < leases; i++) {
    const leaseId = `old-${i}`;
    events.push({
      subject: ADMISSION_SUBJECT,
      event: {
        type: 'LeasesGranted',
        v: 1,
        atMs: now,
        grants: [
          {
            leaseId,
            requester: `old-${i}`,
            slots: [{ limit: 'history', count: 1 }],
            ttlMs: 60_000,
            deadlineMs: now + 60_000,
            fencingToken: i + 1,
            secretHash: SECRET_HASH,
          },
        ],
      },
    });
    events.push({
      subject: leaseSubject(leaseId),
      event: { type: 'LeaseReleased', v: 1, atMs: now, leaseId },
    });
  }
  for (let start = 0; start < events.length; start += 256) {
    await Promise.all(
      events.slice(start, start + 256).map(({ subject, event }) => js.publish(subject, encodeEvent(event))),
    );
  }
};

describe('a gateway restart, with the services as processes', () => {
  it('answers NOT_READY while it replays 100,000 events, and never UNKNOWN_LEASE for a lease in the log', async () => {
    const nats = await startNats();
    const nc = await connectTest(nats.url);
    const answers = new Map<string, number>();
    let gateway: ServiceProcess | undefined;
    try {
      await growHistory(nc, 50_000);
      const known = `old-${49_999}`;
      gateway = await startService(
        'gateway',
        { NATS_URL: nats.url },
        { waitFor: 'answers NOT_READY until done' },
      );
      const client = createLeaseClient({ nc, timeoutMs: 2_000 });
      for (let i = 0; i < 2_000; i++) {
        const answer = await client.get({ leaseId: known }).then(
          (view) => view.status,
          (error: { code: string }) => error.code,
        );
        answers.set(answer, (answers.get(answer) ?? 0) + 1);
        if (answer === 'released') break;
      }
      expect(answers.get('NOT_READY')).toBeGreaterThan(0);
      expect(answers.get('released')).toBe(1);
      expect([...answers.keys()].sort()).toEqual(['NOT_READY', 'released']);
    } finally {
      await gateway?.stop();
      await nc.close();
      await nats.stop();
    }
  }, 120_000);

  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
    cleanups.length = 0;
  });

  for (const history of [0, 50_000]) {
    it(`never drops a renewing holder's lease across a kill -9 and restart of the gateway (${history * 2} events of history)`, async () => {
      const nats = await startNats();
      cleanups.push(() => nats.stop());
      const nc = await connectTest(nats.url);
      cleanups.push(() => nc.close());
      if (history > 0) await growHistory(nc, history);
      const gateway: ServiceProcess = await startService(
        'gateway',
        { NATS_URL: nats.url },
        { timeoutMs: 60_000 },
      );
      cleanups.push(() => gateway.stop());
      const client = createLeaseClient({ nc, timeoutMs: 1_000 });
      await client.defineLimit({ limit: 'gpu', slotsMax: 1 });

      const failures: string[] = [];
      const renewals: Lease[] = [];
      let lostReason: unknown;
      let stillRenewable = false;
      await withLease(
        client,
        { requester: 'holder', slots: [{ limit: 'gpu', count: 1 }], ttlMs: 6_000 },
        async (signal, lease) => {
          await eventually(() => renewals.length >= 1, 10_000);
          await gateway.kill9();
          const downAt = Date.now();
          await gateway.restart();
          const before = renewals.length;
          await eventually(() => renewals.length > before, 15_000);
          expect(Date.now() - downAt).toBeLessThan(6_000);
          expect(signal.aborted).toBe(false);
          const direct = await client.renew(renewals.at(-1) ?? lease);
          stillRenewable = direct.leaseId === lease.leaseId;
        },
        {
          onRenewal: (lease) => renewals.push(lease),
          onLost: (reason) => {
            lostReason = reason;
          },
          onRenewalFailed: (error) => failures.push(error.code),
        },
      );
      expect(lostReason).toBeUndefined();
      expect(stillRenewable).toBe(true);
      expect(failures).not.toContain('UNKNOWN_LEASE');
      expect(failures.every((code) => code === 'NOT_READY' || code === 'UNAVAILABLE')).toBe(true);
    }, 120_000);
  }
});
