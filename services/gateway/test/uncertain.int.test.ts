import { type AppendResult, appendEvent, ensureLeaseStream, Projection } from '@lease/bus';
import { type AcquireLease, LeaseError, leaseSubject, STREAM_NAME } from '@lease/events';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNats } from '../../../test/harness/nats.js';
import { connectTest } from '../../../test/harness/services.js';
import { Admission, GatewayMetrics, LogWriter } from '../src/index.js';

/**
 * An append whose acknowledgement is lost: JetStream stored the message, the gateway heard
 * nothing (connection lost mid-publish). The real append runs; only its answer is dropped.
 */
const losingAcks = (lose: number) => {
  let lost = 0;
  const append: typeof appendEvent = async (js, event, options) => {
    const result = await appendEvent(js, event, options);
    if (lost < lose && result.ok) {
      lost += 1;
      return {
        ok: false,
        conflict: false,
        error: new LeaseError('UNAVAILABLE', 'acknowledgement lost'),
      } as AppendResult;
    }
    return result;
  };
  return append;
};

describe('an admission append whose acknowledgement is lost', () => {
  let nats: Awaited<ReturnType<typeof startNats>>;
  let nc: NatsConnection;

  beforeAll(async () => {
    nats = await startNats();
    nc = await connectTest(nats.url);
    await ensureLeaseStream(nc);
  });
  afterAll(async () => {
    await nc?.close();
    await nats?.stop();
  });

  const admissionWith = async (append: typeof appendEvent) => {
    const projection = new Projection({ js: jetstream(nc), jsm: await jetstreamManager(nc) });
    await projection.start();
    const metrics = new GatewayMetrics();
    const writer = new LogWriter(jetstream(nc), projection, 'test', metrics, append);
    const policy = { ttlMinMs: 1_000, ttlMaxMs: 60_000, metadataMaxBytes: 1_024 };
    const admission = new Admission(
      projection,
      writer,
      policy,
      16,
      Date.now,
      metrics,
      pino({ level: 'silent' }),
    );
    return { projection, admission, metrics };
  };
  const grantsOf = async (leaseId: string) => {
    const consumer = await jetstream(nc).consumers.get(STREAM_NAME);
    const last = (await (await jetstreamManager(nc)).streams.info(STREAM_NAME)).state.last_seq;
    let count = 0;
    for await (const message of await consumer.consume()) {
      const event = JSON.parse(new TextDecoder().decode(message.data));
      if (event.type === 'LeasesGranted')
        count += event.grants.filter((g: { leaseId: string }) => g.leaseId === leaseId).length;
      if (message.seq >= last) break;
    }
    return count;
  };
  const command =
    (leaseId: string) =>
    (nowMs: number): AcquireLease => ({
      type: 'AcquireLease',
      leaseId,
      leaseIdChosen: true,
      requester: leaseId,
      slots: [{ limit: 'pool', count: 1 }],
      ttlMs: 10_000,
      secretHash: 'd'.repeat(64),
      nowMs,
    });

  it('is retried under the same message id and stored once: one lease', async () => {
    const { projection, admission, metrics } = await admissionWith(losingAcks(1));
    try {
      await admission.admin((nowMs) => ({ type: 'DefineLimit', limit: 'pool', slotsMax: 10, nowMs }));
      const outcome = await admission.acquire(command('retried'));
      expect(outcome).toMatchObject({ ok: true, grant: { leaseId: 'retried' } });
      expect(metrics.uncertainRetries).toBeGreaterThanOrEqual(1);
      expect(await grantsOf('retried')).toBe(1);
      expect(projection.state.liveByRequester.get('retried')).toBe(1);
    } finally {
      await projection.stop();
    }
  });

  it('answers UNAVAILABLE when no acknowledgement ever comes, and a client retry finds its one lease', async () => {
    const lost = await admissionWith(losingAcks(10));
    try {
      expect(await lost.admission.acquire(command('unheard'))).toMatchObject({
        ok: false,
        error: { code: 'UNAVAILABLE' },
      });
    } finally {
      await lost.projection.stop();
    }
    const healthy = await admissionWith(appendEvent);
    try {
      const retried = await healthy.admission.acquire(command('unheard'));
      expect(retried).toMatchObject({ ok: true, grant: { leaseId: 'unheard' } });
      expect(await grantsOf('unheard')).toBe(1);
    } finally {
      await healthy.projection.stop();
    }
  });

  it('a renewal is resent without a message id: stored once, then a conflict that sends the gateway to catch up', async () => {
    const { projection, admission } = await admissionWith(appendEvent);
    try {
      await admission.admin((nowMs) => ({ type: 'DefineLimit', limit: 'renewed', slotsMax: 10, nowMs }));
      const granted = await admission.acquire((nowMs) => ({
        ...command('renewed-once')(nowMs),
        slots: [{ limit: 'renewed', count: 1 }],
      }));
      expect(granted).toMatchObject({ ok: true });
      const writer = new LogWriter(jetstream(nc), projection, 'test', new GatewayMetrics(), losingAcks(1));
      const renewal = {
        type: 'LeaseRenewed' as const,
        v: 1 as const,
        atMs: Date.now(),
        leaseId: 'renewed-once',
        ttlMs: 10_000,
        deadlineMs: Date.now() + 10_000,
      };
      expect(await writer.append(renewal, 0)).toEqual({ ok: false, conflict: true });
      const stored = await (await jetstreamManager(nc)).streams.getMessage(STREAM_NAME, {
        last_by_subj: leaseSubject('renewed-once'),
      });
      expect(stored?.header?.get('Nats-Msg-Id') ?? '').toBe('');
      expect(stored?.seq).toBeGreaterThan(0);
      // Exactly one renewal stored: the caller's catch-up sees it, and its next decision appends on top of it.
      expect(await projection.catchUp()).toBe(true);
      expect(projection.state.leases.get('renewed-once')).toMatchObject({
        renewals: 1,
        lastSubjectSeq: stored?.seq,
      });
    } finally {
      await projection.stop();
    }
  });
});
