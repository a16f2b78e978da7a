import { Projection } from '@lease/bus';
import { DEFAULT_POLICY } from '@lease/events';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNats } from '../../../test/harness/nats.js';
import { connectTest, startGateway } from '../../../test/harness/services.js';
import { callGateway, resultOf } from '../../../test/harness/wire.js';
import { Admission, createCommands, GatewayMetrics, LogWriter, Waiting } from '../src/index.js';

/**
 * A replica whose projection cannot catch up (its consumer is stopped, as when its
 * connection to JetStream is lost) while another replica grants a lease: it must answer the
 * retryable NOT_READY, never a final UNKNOWN_LEASE for a lease that is in the log.
 */
describe('a replica that lags the log', () => {
  let nats: Awaited<ReturnType<typeof startNats>>;
  let nc: NatsConnection;
  let gateway: Awaited<ReturnType<typeof startGateway>>;

  beforeAll(async () => {
    nats = await startNats();
    nc = await connectTest(nats.url);
    gateway = await startGateway(nats.url);
  });
  afterAll(async () => {
    await gateway?.stop();
    await nc?.close();
    await nats?.stop();
  });

  it('answers NOT_READY, not UNKNOWN_LEASE, for a lease another replica granted after it stopped folding', async () => {
    const frozen = new Projection({
      js: jetstream(nc),
      jsm: await jetstreamManager(nc),
      catchUpTimeoutMs: 300,
    });
    await frozen.start();
    await frozen.stop();
    const logger = pino({ level: 'silent' });
    const metrics = new GatewayMetrics();
    const writer = new LogWriter(jetstream(nc), frozen, 'lagging', metrics);
    const admission = new Admission(frozen, writer, DEFAULT_POLICY, 16, Date.now, metrics, logger);
    const waiting = new Waiting(frozen, admission, Date.now, logger);
    const lagging = createCommands({
      projection: frozen,
      admission,
      waiting,
      writer,
      policy: DEFAULT_POLICY,
      metrics,
      nowMs: Date.now,
      instance: 'lagging',
      waitMaxMs: 0,
    });
    try {
      resultOf(await callGateway(nc, 'defineLimit', { limit: 'gpu', slotsMax: 2 }));
      const granted = resultOf(
        await callGateway(nc, 'acquire', {
          requester: 'r',
          slots: [{ limit: 'gpu', count: 1 }],
          ttlMs: 30_000,
        }),
      );
      const leaseId = granted.lease.leaseId;
      expect(frozen.state.leases.has(leaseId)).toBe(false);

      expect(await lagging.get({ leaseId })).toMatchObject({
        ok: false,
        error: { code: 'NOT_READY', retryable: true },
      });
      const renewal = await lagging.renew({ leaseId, holderSecret: granted.holderSecret! });
      expect(renewal).toMatchObject({ ok: false, error: { code: 'NOT_READY' } });
      const acquire = await lagging.acquire({
        requester: 'q',
        slots: [{ limit: 'gpu', count: 1 }],
        ttlMs: 30_000,
      });
      expect(acquire).toMatchObject({ ok: false, error: { code: 'NOT_READY' } });
    } finally {
      waiting.stop();
    }
  });
});
