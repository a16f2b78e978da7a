import { encodeEvent, leaseSubject, STREAM_NAME } from '@lease/events';
import { JetStreamApiError, jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNats } from '../../../test/harness/nats.js';
import { connectTest } from '../../../test/harness/services.js';
import { appendEvent, createPublisher, ensureLeaseStream, WRONG_LAST_SEQUENCE } from '../src/index.js';

const released = (leaseId: string) =>
  encodeEvent({ type: 'LeaseReleased', v: 1, atMs: 1_700_000_000_000, leaseId });

describe('the pipelined publisher on a real nats-server', () => {
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

  it('answers as js.publish does: the sequence, 10071 on a stale expectation, a duplicate message id stored once', async () => {
    const publisher = createPublisher(nc);
    try {
      const subject = leaseSubject('pub-1');
      const first = await publisher.publish(subject, released('pub-1'), {
        expect: { lastSubjectSequence: 0 },
      });
      const stale = await publisher
        .publish(subject, released('pub-1'), { expect: { lastSubjectSequence: 0 } })
        .catch((error: unknown) => error);
      expect(stale).toBeInstanceOf(JetStreamApiError);
      expect((stale as JetStreamApiError).code).toBe(WRONG_LAST_SEQUENCE);
      const viaJs = await jetstream(nc)
        .publish(subject, released('pub-1'), { expect: { lastSubjectSequence: 0 } })
        .catch((error: unknown) => error);
      expect((viaJs as JetStreamApiError).code).toBe((stale as JetStreamApiError).code);

      const once = await publisher.publish(subject, released('pub-1'), {
        expect: { lastSubjectSequence: first.seq },
        msgID: 'pub-once',
      });
      const again = await publisher.publish(subject, released('pub-1'), {
        expect: { lastSubjectSequence: first.seq },
        msgID: 'pub-once',
      });
      expect(once).toEqual({ seq: first.seq + 1, duplicate: false });
      expect(again).toEqual({ seq: once.seq, duplicate: true });
      const last = await (await jetstreamManager(nc)).streams.getMessage(STREAM_NAME, {
        last_by_subj: subject,
      });
      expect(last?.seq).toBe(once.seq);
    } finally {
      publisher.close();
    }
  });

  it('keeps hundreds of appends in flight, each answered with its own sequence', async () => {
    const publisher = createPublisher(nc);
    try {
      const results = await Promise.all(
        Array.from({ length: 500 }, (_, i) =>
          appendEvent(
            publisher,
            { type: 'LeaseReleased', v: 1, atMs: 1, leaseId: `many-${i}` },
            { expectedLastSubjectSeq: 0 },
          ),
        ),
      );
      const seqs = results.map((result) => (result.ok ? result.seq : 0));
      expect(new Set(seqs).size).toBe(500);
      expect(seqs.every((seq) => seq > 0)).toBe(true);
    } finally {
      publisher.close();
    }
  });

  it('rejects as uncertain, never as a conflict, what no stream answers or what is still waiting at close', async () => {
    const publisher = createPublisher(nc);
    const nobody = await appendEvent(
      { publish: (_subject, data, options) => publisher.publish('not.a.stream.subject', data, options) },
      { type: 'LeaseReleased', v: 1, atMs: 1, leaseId: 'nobody' },
      { expectedLastSubjectSeq: 0, timeoutMs: 2_000 },
    );
    expect(nobody).toMatchObject({
      ok: false,
      conflict: false,
      error: { code: 'UNAVAILABLE', retryable: true },
    });
    // No acknowledgement can arrive before this synchronous code has run: close() ends the wait.
    const waiting = publisher.publish(leaseSubject('pub-closed'), released('pub-closed'), {
      timeout: 10_000,
    });
    publisher.close();
    await expect(waiting).rejects.toThrow('the publisher was closed');
  });
});
