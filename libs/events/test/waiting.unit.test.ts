import { describe, expect, it } from 'vitest';
import {
  type AcquireLease,
  decide,
  decideAcquisitions,
  decideQueue,
  evolve,
  type LeaseState,
  snapshotOf,
  stateFromSnapshot,
  WAITERS_PER_LIMIT_MAX,
} from '../src/index.js';
import {
  acquire,
  commit,
  expectLeaseError,
  given,
  limitDefined,
  OTHER_SECRET,
  release,
  T0,
} from './helpers.js';

/** One slot, held by `holder`; then each named acquire queued in order, waiting 10 s. */
const queueOf = (...names: string[]): LeaseState => {
  const state = given(limitDefined('gpu', 1));
  commit(state, decide(state, acquire({ leaseId: 'holder', requester: 'holder' })));
  for (const name of names) {
    const { event } = decideQueue(state, [waiting(name)]);
    evolve(state, { seq: state.lastSeq + 1, event: event! });
  }
  return state;
};
const waiting = (name: string, overrides: Partial<AcquireLease> = {}): AcquireLease =>
  acquire({ leaseId: name, requester: name, waitUntilMs: T0 + 10_000, ...overrides });

describe('waiting for slots', () => {
  it('queues an acquire that found no free slot, until its wait ends', () => {
    const state = given(limitDefined('gpu', 1));
    commit(state, decide(state, acquire({ leaseId: 'holder', requester: 'holder' })));
    const refused = decideAcquisitions(state, [waiting('w1')]);
    expect(refused.outcomes[0]).toMatchObject({ ok: false, error: { code: 'NO_CAPACITY' } });
    const { event, outcomes } = decideQueue(state, [waiting('w1')]);
    expect(outcomes[0]).toMatchObject({
      ok: true,
      alreadyQueued: false,
      waiter: { leaseId: 'w1', expiresAtMs: T0 + 10_000 },
    });
    evolve(state, { seq: state.lastSeq + 1, event: event! });
    expect([...state.waiters.keys()]).toEqual(['w1']);
  });

  it('does not queue an acquire that does not wait', () => {
    const state = queueOf();
    expectLeaseError(
      decideQueue(state, [acquire({ leaseId: 'x', requester: 'x' })]).outcomes[0]!,
      'NO_CAPACITY',
    );
  });

  it('serves waiters first come, first served: a later request never overtakes a waiter', () => {
    const state = queueOf('w1', 'w2');
    commit(state, decide(state, release({ leaseId: 'holder', nowMs: T0 + 1 })));
    // A newcomer and the second waiter find the slot free, but w1 is ahead of both.
    expectLeaseError(
      decide(state, acquire({ leaseId: 'late', requester: 'late', nowMs: T0 + 2 })),
      'NO_CAPACITY',
    );
    expectLeaseError(decide(state, waiting('w2', { nowMs: T0 + 2 })), 'NO_CAPACITY');
    const head = decide(state, waiting('w1', { nowMs: T0 + 2 }));
    expect(head).toMatchObject({
      ok: true,
      events: [{ type: 'LeasesGranted', grants: [{ leaseId: 'w1' }] }],
    });
    commit(state, head);
    expect([...state.waiters.keys()]).toEqual(['w2']);
  });

  it('lets a waiter whose place expired be overtaken', () => {
    const state = queueOf('w1', 'w2');
    commit(state, decide(state, release({ leaseId: 'holder', nowMs: T0 + 1 })));
    const afterExpiry = T0 + 10_001;
    expect(decide(state, waiting('w2', { nowMs: afterExpiry, waitUntilMs: T0 + 20_000 })).ok).toBe(true);
  });

  it('keeps the place of a waiter whose request comes back through another replica', () => {
    const state = queueOf('w1');
    const again = decideQueue(state, [waiting('w1', { nowMs: T0 + 5 })]);
    expect(again.event).toBeNull();
    expect(again.outcomes[0]).toMatchObject({ ok: true, alreadyQueued: true });
  });

  it("refuses someone else's request under a waiting lease id", () => {
    const state = queueOf('w1');
    expectLeaseError(decide(state, waiting('w1', { requester: 'intruder' })), 'LEASE_ID_IN_USE');
    expectLeaseError(
      decideQueue(state, [waiting('w1', { secretHash: OTHER_SECRET })]).outcomes[0]!,
      'LEASE_ID_IN_USE',
    );
  });

  it('ends a wait when asked with the holder secret, and only then', () => {
    const state = queueOf('w1', 'w2');
    const end = { type: 'EndWait' as const, leaseId: 'w1', reason: 'cancelled' as const, nowMs: T0 + 1 };
    expectLeaseError(decide(state, { ...end, secretHash: OTHER_SECRET }), 'FORBIDDEN');
    expectLeaseError(
      decide(state, { ...end, leaseId: 'nobody', secretHash: acquire().secretHash }),
      'UNKNOWN_LEASE',
    );
    commit(state, decide(state, { ...end, secretHash: acquire().secretHash }));
    expect([...state.waiters.keys()]).toEqual(['w2']);
  });

  it('bounds the queue of a limit', () => {
    const state = queueOf();
    const many = Array.from({ length: WAITERS_PER_LIMIT_MAX + 1 }, (_, i) => waiting(`w${i}`));
    const { outcomes } = decideQueue(state, many);
    expect(outcomes.filter((o) => o.ok)).toHaveLength(WAITERS_PER_LIMIT_MAX);
    expect(outcomes.at(-1)).toMatchObject({ ok: false, error: { code: 'NO_CAPACITY' } });
  });

  it('drops expired waiters when folding later admission events, and keeps the queue in snapshots', () => {
    const state = queueOf('w1', 'w2');
    const restored = stateFromSnapshot(JSON.parse(JSON.stringify(snapshotOf(state))));
    expect(restored.ok && [...restored.state.waiters.keys()]).toEqual(['w1', 'w2']);
    evolve(state, { seq: state.lastSeq + 1, event: limitDefined('tpu', 1) });
    expect(state.waiters.size).toBe(2);
    evolve(state, { seq: state.lastSeq + 1, event: { ...limitDefined('npu', 1), atMs: T0 + 10_001 } });
    expect(state.waiters.size).toBe(0);
  });

  it('records a queued lease id that is already in use as an anomaly', () => {
    const state = queueOf('w1');
    const { event } = decideQueue(queueOf(), [waiting('w1')]);
    evolve(state, { seq: state.lastSeq + 1, event: event! });
    expect(state.anomalies.at(-1)).toMatchObject({ kind: 'DUPLICATE_LEASE_ID', leaseId: 'w1' });
  });
});
