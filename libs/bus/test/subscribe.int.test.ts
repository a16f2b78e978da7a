import { ADMISSION_SUBJECT, encodeEvent, type LeaseEvent, leaseSubject, STREAM_NAME } from '@lease/events';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type NatsServerHandle, startNats } from '../../../test/harness/nats.js';
import { connectTest } from '../../../test/harness/services.js';
import {
  type EventFilter,
  ensureLeaseStream,
  type SubscribedEvent,
  type SubscriptionProblem,
  subscribe,
} from '../src/index.js';

const T0 = 1_767_225_600_000;
const SECRET_HASH = 'c'.repeat(64);

const grant = (leaseId: string, requester: string, limit: string, fencingToken: number): LeaseEvent => ({
  type: 'LeasesGranted',
  v: 1,
  atMs: T0,
  grants: [
    {
      leaseId,
      requester,
      slots: [{ limit, count: 1 }],
      ttlMs: 60_000,
      deadlineMs: T0 + 60_000,
      fencingToken,
      secretHash: SECRET_HASH,
    },
  ],
});

/** Takes `count` items (bounded: the subscription is closed after them). */
const take = async (
  iterable: AsyncIterable<SubscribedEvent>,
  count: number,
  each?: (item: SubscribedEvent) => Promise<void>,
) => {
  const items: SubscribedEvent[] = [];
  if (count === 0) return items;
  for await (const item of iterable) {
    await each?.(item);
    items.push(item);
    if (items.length >= count) break;
  }
  return items;
};

describe('subscribe(): the typed subscription API on a real nats-server', () => {
  let nats: NatsServerHandle;
  let nc: NatsConnection;
  const publish = async (subject: string, data: LeaseEvent | string) =>
    (await jetstream(nc).publish(subject, typeof data === 'string' ? data : encodeEvent(data))).seq;

  beforeAll(async () => {
    nats = await startNats();
    nc = await connectTest(nats.url);
    await ensureLeaseStream(nc);
    // seq 1..6: limits and grants; 7: corrupt; 8: unknown type; 9..10: lifecycle.
    await publish(ADMISSION_SUBJECT, { type: 'LimitDefined', v: 1, atMs: T0, limit: 'gpu', slotsMax: 10 });
    await publish(ADMISSION_SUBJECT, { type: 'LimitDefined', v: 1, atMs: T0, limit: 'cpu', slotsMax: 10 });
    await publish(ADMISSION_SUBJECT, {
      type: 'RequesterLimitSet',
      v: 1,
      atMs: T0,
      requester: '*',
      leasesMax: 5,
    });
    await publish(ADMISSION_SUBJECT, grant('g1', 'alice', 'gpu', 1));
    await publish(ADMISSION_SUBJECT, grant('c1', 'bob', 'cpu', 2));
    await publish(ADMISSION_SUBJECT, grant('g2', 'bob', 'gpu', 3));
    await publish(leaseSubject('c1'), '\u00ff{ not json');
    await publish(ADMISSION_SUBJECT, JSON.stringify({ type: 'LeaseTeleported', v: 1, atMs: T0 }));
    await publish(leaseSubject('g1'), {
      type: 'LeaseRenewed',
      v: 1,
      atMs: T0 + 1,
      leaseId: 'g1',
      ttlMs: 60_000,
      deadlineMs: T0 + 60_001,
    });
    await publish(leaseSubject('c1'), { type: 'LeaseReleased', v: 1, atMs: T0 + 2, leaseId: 'c1' });
  });
  afterAll(async () => {
    await nc?.close();
    await nats?.stop();
  });

  it('delivers every decodable event in order, typed, and skips, counts and reports the rest without throwing', async () => {
    const problems: SubscriptionProblem[] = [];
    const subscription = await subscribe(nc, { from: 'start', batch: 3, onProblem: (p) => problems.push(p) });
    const items = await take(subscription, 8);
    expect(items.map((item) => item.seq)).toEqual([1, 2, 3, 4, 5, 6, 9, 10]);
    expect(items[3]!.event).toMatchObject({ type: 'LeasesGranted', grants: [{ leaseId: 'g1' }] });
    expect(items[3]!.subject).toBe(ADMISSION_SUBJECT);
    expect(items[3]!.time).toBeInstanceOf(Date);
    expect(problems.map((p) => [p.seq, p.subject, p.problem])).toEqual([
      [7, leaseSubject('c1'), 'corrupt'],
      [8, ADMISSION_SUBJECT, 'unknown-type'],
    ]);
    expect(subscription.problems).toBe(2);
    await subscription.close();
  });

  it('filters by lease, requester, limit and type, mapping lifecycle events through the grants it saw', async () => {
    const seqs = async (filter: EventFilter, count: number) => {
      const subscription = await subscribe(nc, { from: 'start', filter });
      const items = await take(subscription, count);
      await subscription.close();
      return items.map((item) => item.seq);
    };
    expect(await seqs({ leaseId: 'c1' }, 2)).toEqual([5, 10]);
    expect(await seqs({ requester: 'alice' }, 3)).toEqual([3, 4, 9]);
    expect(await seqs({ limit: 'cpu' }, 3)).toEqual([2, 5, 10]);
    expect(await seqs({ limit: 'gpu', types: ['LeasesGranted', 'LeaseRenewed'] }, 3)).toEqual([4, 6, 9]);
    expect(await seqs({ types: ['LeaseReleased'] }, 1)).toEqual([10]);
    // A lease granted before `from` is unknown to the requester filter (documented).
    const late = await subscribe(nc, { from: { seq: 9 }, filter: { requester: 'alice' }, pullWaitMs: 1_000 });
    const got: number[] = [];
    const reading = (async () => {
      for await (const item of late) got.push(item.seq);
    })();
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    await late.close();
    await reading;
    expect(got).toEqual([]);
  });

  it('starts from a sequence, from a time, and from now', async () => {
    const fromSeq = await subscribe(nc, { from: { seq: 9 } });
    expect((await take(fromSeq, 2)).map((item) => item.seq)).toEqual([9, 10]);
    await fromSeq.close();
    const jsm = await jetstreamManager(nc);
    const nine = await jsm.direct.getMessage(STREAM_NAME, { seq: 9 });
    const fromTime = await subscribe(nc, { from: { time: nine!.time } });
    expect((await take(fromTime, 1))[0]!.seq).toBeGreaterThanOrEqual(9);
    await fromTime.close();

    const fromNow = await subscribe(nc, { from: 'now', pullWaitMs: 1_000 });
    const next = take(fromNow, 1);
    await new Promise((resolve) => setTimeout(resolve, 200));
    const seq = await publish(ADMISSION_SUBJECT, {
      type: 'LimitDefined',
      v: 1,
      atMs: T0,
      limit: 'now',
      slotsMax: 1,
    });
    expect((await next).map((item) => item.seq)).toEqual([seq]);
    await fromNow.close();
  });

  it('pulls a bounded batch at a time: what it has read is never more than a batch ahead of the caller', async () => {
    const subscription = await subscribe(nc, { from: 'start', batch: 2 });
    let taken = 0;
    for await (const item of subscription) {
      taken += 1;
      expect(subscription.read - item.seq).toBeLessThanOrEqual(2);
      expect(subscription.read).toBeLessThanOrEqual(taken + 2 + subscription.problems);
      if (taken >= 6) break;
    }
    await subscription.close();
  });

  it('resumes a durable subscriber killed mid-stream after its last acknowledged event, losing and repeating none', async () => {
    const all = await subscribe(nc, { from: 'start' });
    const last = (await (await jetstreamManager(nc)).streams.info(STREAM_NAME)).state.last_seq;
    const expected = (await take(all, last - 2)).map((item) => item.seq);
    await all.close();
    expect(expected.at(-1)).toBe(last);

    const first = await connectTest(nats.url);
    const acked: number[] = [];
    const crashed = await subscribe(first, { from: 'start', durable: 'resume-test', batch: 4 });
    // Take five, acknowledging only the first three, then the connection dies.
    await take(crashed, 5, async (item) => {
      if (acked.length < 3) {
        await item.ack();
        acked.push(item.seq);
      }
    });
    await first.close();

    const second = await connectTest(nats.url);
    try {
      const resumed = await subscribe(second, { from: 'start', durable: 'resume-test', batch: 4 });
      const rest = await take(resumed, expected.length - acked.length, (item) => item.ack());
      await resumed.close();
      expect([...acked, ...rest.map((item) => item.seq)]).toEqual(expected);

      // Everything acknowledged: a third start has nothing left but what comes next.
      const third = await subscribe(second, { from: 'start', durable: 'resume-test', pullWaitMs: 1_000 });
      const seq = await publish(ADMISSION_SUBJECT, {
        type: 'LimitDefined',
        v: 1,
        atMs: T0,
        limit: 'after',
        slotsMax: 1,
      });
      expect((await take(third, 1, (item) => item.ack())).map((item) => item.seq)).toEqual([seq]);
      await third.close();
    } finally {
      await second.close();
    }
  });
});
