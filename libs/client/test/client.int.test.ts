import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNats } from '../../../test/harness/nats.js';
import { connectTest, startGateway } from '../../../test/harness/services.js';
import { createLeaseClient, type Lease, withLease } from '../src/index.js';

describe('the client SDK against a real gateway', () => {
  let nats: Awaited<ReturnType<typeof startNats>>;
  let nc: NatsConnection;
  let gateway: Awaited<ReturnType<typeof startGateway>>;
  let client: ReturnType<typeof createLeaseClient>;

  beforeAll(async () => {
    nats = await startNats();
    nc = await connectTest(nats.url);
    gateway = await startGateway(nats.url, { TTL_MIN_MS: '300' });
    client = createLeaseClient({ nc, timeoutMs: 2_000 });
    await client.defineLimit({ limit: 'one', slotsMax: 1 });
  });
  afterAll(async () => {
    await gateway?.stop();
    await nc?.close();
    await nats?.stop();
  });

  it('runs work under a lease it renews in the background and releases at the end', async () => {
    const renewals: Lease[] = [];
    const result = await withLease(
      client,
      { requester: 'worker', slots: [{ limit: 'one', count: 1 }], ttlMs: 600 },
      async (signal, lease) => {
        await new Promise((resolve) => setTimeout(resolve, 1_000));
        return { aborted: signal.aborted, leaseId: lease.leaseId };
      },
      { onRenewal: (lease) => renewals.push(lease) },
    );
    expect(result.aborted).toBe(false);
    expect(renewals.length).toBeGreaterThanOrEqual(2);
    expect((await client.get({ leaseId: result.leaseId })).status).toBe('released');
  });

  it('waits for a slot, and measures its local deadline from when the grant was decided', async () => {
    const holder = await client.acquire({
      requester: 'first',
      slots: [{ limit: 'one', count: 1 }],
      ttlMs: 10_000,
    });
    const sentAt = client.clock.monotonicMs();
    const waiting = client.acquire({
      requester: 'second',
      leaseId: 'second-lease',
      slots: [{ limit: 'one', count: 1 }],
      ttlMs: 1_000,
      waitMs: 10_000,
    });
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    await client.release(holder);
    const granted = await waiting;
    expect(granted.leaseId).toBe('second-lease');
    // Measured from the send alone, the local deadline would already have passed.
    expect(granted.localDeadlineMonotonicMs).toBeGreaterThan(sentAt + 1_000 + 1_000);
    expect(granted.localDeadlineMonotonicMs).toBeLessThanOrEqual(client.clock.monotonicMs() + 1_000);
    await client.release(granted);
  });

  it('cancels a waiting acquire, which then fails with the final WAIT_CANCELLED', async () => {
    const holder = await client.acquire({
      requester: 'blocker',
      slots: [{ limit: 'one', count: 1 }],
      ttlMs: 10_000,
    });
    const secret = 'my-own-holder-secret-123';
    const waiting = client.acquire({
      requester: 'quitter',
      leaseId: 'quitter-lease',
      holderSecret: secret,
      slots: [{ limit: 'one', count: 1 }],
      ttlMs: 1_000,
      waitMs: 10_000,
    });
    const settled = waiting.then(
      () => undefined,
      (error: unknown) => error,
    );
    for (let i = 0; i < 100 && !gateway.projection.state.waiters.has('quitter-lease'); i++) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await client.cancel({ leaseId: 'quitter-lease', holderSecret: secret });
    expect(await settled).toMatchObject({ code: 'WAIT_CANCELLED', retryable: false });
    await client.release(holder);
  });

  it('maps "no gateway answers" to a retryable UNAVAILABLE', async () => {
    const other = await startNats();
    const lonely = await connectTest(other.url);
    try {
      const nobody = createLeaseClient({ nc: lonely, timeoutMs: 500 });
      await expect(nobody.listLimits()).rejects.toMatchObject({ code: 'UNAVAILABLE', retryable: true });
    } finally {
      await lonely.close();
      await other.stop();
    }
  });
});
