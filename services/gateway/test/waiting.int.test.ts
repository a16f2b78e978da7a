import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNats } from '../../../test/harness/nats.js';
import { connectTest, eventually, startGateway } from '../../../test/harness/services.js';
import { callGateway, resultOf } from '../../../test/harness/wire.js';

const secret = (name: string) => `secret-of-${name}-0123456789`;

describe('acquires that wait for slots, on two gateway replicas', () => {
  let nats: Awaited<ReturnType<typeof startNats>>;
  let nc: NatsConnection;
  let gateways: Awaited<ReturnType<typeof startGateway>>[] = [];
  const state = () => gateways[0]!.projection.state;

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

  const holdOnly = async (limit: string) => {
    resultOf(await callGateway(nc, 'defineLimit', { limit, slotsMax: 1 }));
    return resultOf(
      await callGateway(nc, 'acquire', {
        requester: `${limit}-holder`,
        slots: [{ limit, count: 1 }],
        ttlMs: 60_000,
      }),
    );
  };
  const waitFor = (limit: string, name: string, waitMs: number) =>
    callGateway(nc, 'acquire', {
      requester: name,
      leaseId: name,
      holderSecret: secret(name),
      slots: [{ limit, count: 1 }],
      ttlMs: 60_000,
      waitMs,
    });

  it('grants waiters first come, first served, whichever replica holds each request', async () => {
    const held = await holdOnly('fifo');
    const names = ['w1', 'w2', 'w3', 'w4'];
    const replies: Promise<Awaited<ReturnType<typeof waitFor>>>[] = [];
    for (const name of names) {
      replies.push(waitFor('fifo', name, 20_000));
      // The next one is sent only once this one holds its place in the log's queue.
      await eventually(() => gateways.every((g) => g.projection.state.waiters.has(name)));
    }
    expect([...state().waiters.keys()]).toEqual(names);
    // A newcomer that does not wait is refused although it came last: the queue is ahead of it.
    const late = await callGateway(nc, 'acquire', {
      requester: 'late',
      slots: [{ limit: 'fifo', count: 1 }],
      ttlMs: 60_000,
      noWait: true,
    });
    expect(late).toMatchObject({ ok: false, error: { code: 'NO_CAPACITY' } });

    const order: string[] = [];
    let current = { leaseId: held.lease.leaseId, holderSecret: held.holderSecret! };
    for (let i = 0; i < names.length; i++) {
      resultOf(await callGateway(nc, 'release', current));
      const next = await Promise.race(
        replies
          .map((reply, index) => reply.then((r) => ({ r, index })))
          .filter((_, index) => !order.includes(names[index]!)),
      );
      const granted = resultOf(next.r);
      expect(granted.waitedMs).toBeGreaterThan(0);
      order.push(granted.lease.leaseId);
      current = { leaseId: granted.lease.leaseId, holderSecret: granted.holderSecret! };
    }
    expect(order).toEqual(names);
    const tokens = (await Promise.all(replies)).map((reply) => resultOf(reply).lease.fencingToken);
    expect(tokens).toEqual([...tokens].sort((a, b) => a - b));
    expect(state().waiters.size).toBe(0);
    expect(state().anomalyCount).toBe(0);
  });

  it('answers WAIT_TIMEOUT when no slot frees within the wait, and gives up the place', async () => {
    await holdOnly('slow');
    const started = Date.now();
    const reply = await waitFor('slow', 'patient', 600);
    expect(reply).toMatchObject({ ok: false, error: { code: 'WAIT_TIMEOUT', retryable: true } });
    expect(Date.now() - started).toBeGreaterThanOrEqual(550);
    await eventually(() => !state().waiters.has('patient'));
  });

  it('answers WAIT_CANCELLED to a waiting acquire cancelled through any replica', async () => {
    await holdOnly('cancel');
    const waiting = waitFor('cancel', 'quitter', 20_000);
    await eventually(() => state().waiters.has('quitter'));
    const stranger = await callGateway(nc, 'cancel', { leaseId: 'quitter', holderSecret: secret('someone') });
    expect(stranger).toMatchObject({ ok: false, error: { code: 'FORBIDDEN' } });
    expect(
      resultOf(await callGateway(nc, 'cancel', { leaseId: 'quitter', holderSecret: secret('quitter') })),
    ).toEqual({
      leaseId: 'quitter',
      cancelled: true,
    });
    expect(await waiting).toMatchObject({ ok: false, error: { code: 'WAIT_CANCELLED', retryable: false } });
    expect(
      await callGateway(nc, 'cancel', { leaseId: 'quitter', holderSecret: secret('quitter') }),
    ).toMatchObject({
      ok: false,
      error: { code: 'UNKNOWN_LEASE' },
    });
  });

  it('answers a noWait acquire at once, even with a wait asked for', async () => {
    await holdOnly('busy');
    const started = Date.now();
    const reply = await callGateway(nc, 'acquire', {
      requester: 'hasty',
      slots: [{ limit: 'busy', count: 1 }],
      ttlMs: 60_000,
      waitMs: 5_000,
      noWait: true,
    });
    expect(reply).toMatchObject({ ok: false, error: { code: 'NO_CAPACITY' } });
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(state().waiters.has('hasty')).toBe(false);
  });
});
