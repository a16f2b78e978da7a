import { decodeEvent, fold, initialState, leaseSubject, STREAM_NAME, type StoredEvent } from '@lease/events';
import { DeliverPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNats } from '../../../test/harness/nats.js';
import { connectTest, eventually, startGateway } from '../../../test/harness/services.js';
import { callGateway } from '../../../test/harness/wire.js';
import { appendEvent, ensureLeaseStream, Projection } from '../src/index.js';

const readStored = async (nc: NatsConnection): Promise<StoredEvent[]> => {
  const js = jetstream(nc);
  const last = (await (await jetstreamManager(nc)).streams.info(STREAM_NAME)).state.last_seq;
  const consumer = await js.consumers.get(STREAM_NAME, { deliver_policy: DeliverPolicy.All });
  const messages = await consumer.consume();
  const out: StoredEvent[] = [];
  for await (const message of messages) {
    const decoded = decodeEvent(message.data);
    if (decoded.ok) out.push({ seq: message.seq, event: decoded.event });
    if (message.seq >= last) break;
  }
  await messages.close();
  return out;
};

describe('the projection on a real nats-server', () => {
  let nats: Awaited<ReturnType<typeof startNats>>;
  let nc: NatsConnection;

  beforeAll(async () => {
    nats = await startNats();
    nc = await connectTest(nats.url);
  });
  afterAll(async () => {
    await nc?.close();
    await nats?.stop();
  });

  it('rebuilds from the stream exactly the state the live gateway folded', async () => {
    const gateway = await startGateway(nats.url);
    try {
      await callGateway(nc, 'defineLimit', { limit: 'cpu', slotsMax: 6 });
      await callGateway(nc, 'setRequesterLimit', { requester: '*', leasesMax: 2 });
      const held: { leaseId: string; holderSecret: string }[] = [];
      for (let i = 0; i < 30; i++) {
        const reply = await callGateway(nc, 'acquire', {
          requester: `r${i % 5}`,
          slots: [{ limit: 'cpu', count: 1 + (i % 2) }],
          ttlMs: 60_000,
          idempotencyKey: `k${i}`,
        });
        if (reply.ok)
          held.push({ leaseId: reply.result.lease.leaseId, holderSecret: reply.result.holderSecret! });
        const victim = held[i % Math.max(held.length, 1)];
        if (victim && i % 3 === 0) await callGateway(nc, 'renew', victim);
        if (victim && i % 4 === 0) await callGateway(nc, 'release', victim);
        if (victim && i % 7 === 0)
          await callGateway(nc, 'revoke', { leaseId: victim.leaseId, reason: 'admin' });
      }
      const live = gateway.projection.state;
      expect(live.lastSeq).toBeGreaterThan(20);

      const replayed = new Projection({ js: jetstream(nc), jsm: await jetstreamManager(nc) });
      await replayed.start();
      await replayed.stop();
      expect(replayed.state).toEqual(live);
      expect(fold(initialState(), await readStored(nc))).toEqual(live);
    } finally {
      await gateway.stop();
    }
  });

  it('answers a retryable NOT_READY until it has caught up', async () => {
    const projection = new Projection({ js: jetstream(nc), jsm: await jetstreamManager(nc) });
    expect(projection.notReady()).toMatchObject({ code: 'NOT_READY', retryable: true });
    await projection.start();
    expect(projection.notReady()).toBeUndefined();
    await projection.stop();
  });

  it('skips, counts and survives an undecodable event, and still tracks its subject for the next append', async () => {
    const gateway = await startGateway(nats.url);
    try {
      await callGateway(nc, 'defineLimit', { limit: 'junk', slotsMax: 1 });
      const acquired = await callGateway(nc, 'acquire', {
        requester: 'junk-holder',
        slots: [{ limit: 'junk', count: 1 }],
        ttlMs: 60_000,
      });
      if (!acquired.ok) throw new Error('acquire failed');
      const { leaseId } = acquired.result.lease;
      const js = jetstream(nc);
      await js.publish(leaseSubject(leaseId), new TextEncoder().encode('{"type":"LeaseTeleported","v":1}'));
      await js.publish(leaseSubject(leaseId), new Uint8Array([0xff, 0x00, 0x13]));
      await eventually(() => gateway.projection.problems === 2);
      const renewed = await callGateway(nc, 'renew', { leaseId, holderSecret: acquired.result.holderSecret });
      expect(renewed).toMatchObject({ ok: true, result: { lease: { renewals: 1 } } });
    } finally {
      await gateway.stop();
    }
  });

  it('folds an event it appended as the object it serialized, without decoding its bytes again', async () => {
    await ensureLeaseStream(nc);
    const projection = new Projection({ js: jetstream(nc), jsm: await jetstreamManager(nc) });
    await projection.start();
    try {
      const event = { type: 'LimitDefined' as const, v: 1 as const, atMs: 1, limit: 'own-1', slotsMax: 3 };
      // Announced before the append (nothing else writes here now, so its sequence is known):
      // a different object under that sequence shows which one the fold took. The services
      // only ever announce the object the bytes were made from, after its acknowledgement.
      const next = (await (await jetstreamManager(nc)).streams.info(STREAM_NAME)).state.last_seq + 1;
      projection.appended(next, { ...event, slotsMax: 5 });
      const appended = await appendEvent(jetstream(nc), event, {
        expectedLastSubjectSeq: projection.state.admissionSeq,
      });
      expect(appended).toMatchObject({ ok: true, seq: next });
      if (!appended.ok) return;
      expect(await projection.waitFor(appended.seq, 5_000)).toBe(true);
      expect(projection.state.limits.get('own-1')).toEqual({ slotsMax: 5, used: 0 });
    } finally {
      await projection.stop();
    }
  });

  it('answers a retryable UNAVAILABLE when JetStream cannot be reached, and loses nothing acknowledged', async () => {
    const own = await startNats();
    const conn = await connectTest(own.url);
    try {
      await ensureLeaseStream(conn);
      const js = jetstream(conn);
      const event = { type: 'LimitDefined' as const, v: 1 as const, atMs: 1, limit: 'durable', slotsMax: 1 };
      expect(await appendEvent(js, event, { expectedLastSubjectSeq: 0 })).toMatchObject({ ok: true, seq: 1 });
      await own.kill9();
      const failed = await appendEvent(
        js,
        { ...event, limit: 'lost' },
        { expectedLastSubjectSeq: 1, timeoutMs: 500 },
      );
      expect(failed).toMatchObject({
        ok: false,
        conflict: false,
        error: { code: 'UNAVAILABLE', retryable: true },
      });
      await own.restart();
      await eventually(
        async () => (await (await jetstreamManager(conn)).streams.info(STREAM_NAME)).state.last_seq === 1,
        15_000,
        100,
      );
      const projection = new Projection({ js: jetstream(conn), jsm: await jetstreamManager(conn) });
      await projection.start();
      await projection.stop();
      expect(projection.state.limits.get('durable')).toEqual({ slotsMax: 1, used: 0 });
    } finally {
      await conn.close();
      await own.stop();
    }
  });
});
