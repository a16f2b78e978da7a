import { describe, expect, it } from 'vitest';
import {
  decodeEvent,
  EndedQueue,
  encodeEvent,
  evolve,
  type Grant,
  initialState,
  type LeaseEvent,
  type LeaseState,
  snapshotOf,
  stateFromSnapshot,
} from '../src/index.js';
import { given, limitDefined, SECRET, T0 } from './helpers.js';

const grant = (overrides: Partial<Grant> = {}): Grant => ({
  leaseId: 'lease-1',
  requester: 'req-1',
  slots: [{ limit: 'gpu', count: 1 }],
  ttlMs: 30_000,
  deadlineMs: T0 + 30_000,
  fencingToken: 1,
  secretHash: SECRET,
  ...overrides,
});
const granted = (...grants: Grant[]): LeaseEvent => ({ type: 'LeasesGranted', v: 1, atMs: T0, grants });
const renewed = (leaseId: string, atMs: number): LeaseEvent => ({
  type: 'LeaseRenewed',
  v: 1,
  atMs,
  leaseId,
  ttlMs: 30_000,
  deadlineMs: atMs + 30_000,
});
const revoked = (leaseId: string, decidedAgainstSeq: number): LeaseEvent => ({
  type: 'LeaseRevoked',
  v: 1,
  atMs: T0 + 60_000,
  leaseId,
  reason: 'expired',
  deadlineMs: T0 + 30_000,
  decidedAgainstSeq,
});
const released = (leaseId: string): LeaseEvent => ({ type: 'LeaseReleased', v: 1, atMs: T0 + 1, leaseId });

const lastAnomaly = (state: LeaseState) => state.anomalies.at(-1);

describe('the fold is the judge', () => {
  it('does not apply a grant beyond a limit, and records it with its sequence', () => {
    const state = given(
      limitDefined('gpu', 1),
      granted(grant()),
      granted(grant({ leaseId: 'b', requester: 'r2', fencingToken: 2 })),
    );
    expect(state.limits.get('gpu')!.used).toBe(1);
    expect(state.leases.has('b')).toBe(false);
    expect(lastAnomaly(state)).toMatchObject({ seq: 3, kind: 'OVERSUBSCRIBED', leaseId: 'b', limit: 'gpu' });
  });

  it('does not apply a grant beyond the requester limit', () => {
    const state = given(limitDefined('gpu', 4), granted(grant(), grant({ leaseId: 'b', fencingToken: 2 })));
    expect(state.leases.has('b')).toBe(false);
    expect(lastAnomaly(state)).toMatchObject({ seq: 2, kind: 'REQUESTER_OVER_LIMIT', leaseId: 'b' });
  });

  it('does not apply a grant whose fencing token does not grow', () => {
    const state = given(
      limitDefined('gpu', 4),
      granted(grant({ fencingToken: 5 })),
      granted(grant({ leaseId: 'b', requester: 'r2', fencingToken: 5 })),
    );
    expect(lastAnomaly(state)).toMatchObject({ seq: 3, kind: 'FENCING_NOT_GROWING' });
    expect(state.fencingToken).toBe(5);
  });

  it('does not apply a grant that reuses a lease id, or names an undefined limit', () => {
    const state = given(
      limitDefined('gpu', 4),
      granted(grant()),
      granted(grant({ requester: 'r2', fencingToken: 2 })),
    );
    expect(lastAnomaly(state)).toMatchObject({ seq: 3, kind: 'DUPLICATE_LEASE_ID' });
    evolve(state, {
      seq: 4,
      event: granted(
        grant({ leaseId: 'c', requester: 'r3', fencingToken: 3, slots: [{ limit: 'tpu', count: 1 }] }),
      ),
    });
    expect(lastAnomaly(state)).toMatchObject({ seq: 4, kind: 'UNKNOWN_LIMIT', limit: 'tpu' });
  });

  it('does not apply a revocation decided against a view older than the last renewal', () => {
    const state = given(
      limitDefined('gpu', 1),
      granted(grant()),
      renewed('lease-1', T0 + 10_000),
      revoked('lease-1', 0),
    );
    expect(state.leases.get('lease-1')!.status).toBe('live');
    expect(state.limits.get('gpu')!.used).toBe(1);
    expect(lastAnomaly(state)).toMatchObject({ seq: 4, kind: 'STALE_REVOCATION', leaseId: 'lease-1' });
    // JetStream counted the rejected-by-the-fold message, so the next append must expect it.
    expect(state.leases.get('lease-1')!.lastSubjectSeq).toBe(4);
  });

  it('applies a revocation decided against the lease as it is', () => {
    const state = given(
      limitDefined('gpu', 1),
      granted(grant()),
      renewed('lease-1', T0 + 10_000),
      revoked('lease-1', 3),
    );
    expect(state.leases.get('lease-1')).toMatchObject({
      status: 'revoked',
      revokeReason: 'expired',
      endSeq: 4,
    });
    expect(state.anomalyCount).toBe(0);
  });

  it('does not apply a renewal after the end of a lease, or after its deadline', () => {
    const state = given(
      limitDefined('gpu', 1),
      granted(grant()),
      released('lease-1'),
      renewed('lease-1', T0 + 2),
    );
    expect(lastAnomaly(state)).toMatchObject({ seq: 4, kind: 'AFTER_END' });
    const late = given(limitDefined('gpu', 1), granted(grant()), renewed('lease-1', T0 + 30_001));
    expect(lastAnomaly(late)).toMatchObject({ seq: 3, kind: 'RENEWAL_AFTER_DEADLINE' });
    expect(late.leases.get('lease-1')!.deadlineMs).toBe(T0 + 30_000);
  });

  it('does not apply lifecycle events of a lease it never granted', () => {
    const state = given(limitDefined('gpu', 1), released('ghost'));
    expect(lastAnomaly(state)).toMatchObject({ seq: 2, kind: 'UNKNOWN_LEASE', leaseId: 'ghost' });
  });

  it('does not apply limit changes that contradict the state', () => {
    const state = given(limitDefined('gpu', 2), limitDefined('gpu', 3), granted(grant()));
    expect(lastAnomaly(state)).toMatchObject({ seq: 2, kind: 'LIMIT_EXISTS' });
    evolve(state, { seq: 4, event: { type: 'LimitRemoved', v: 1, atMs: T0, limit: 'gpu' } });
    expect(lastAnomaly(state)).toMatchObject({ seq: 4, kind: 'LIMIT_IN_USE' });
    evolve(state, {
      seq: 5,
      event: { type: 'LimitResized', v: 1, atMs: T0, limit: 'tpu', slotsMax: 1, previousSlotsMax: 2 },
    });
    expect(lastAnomaly(state)).toMatchObject({ seq: 5, kind: 'UNKNOWN_LIMIT' });
    expect(state.limits.get('gpu')).toEqual({ slotsMax: 2, used: 1 });
  });

  it('skips an event delivered twice', () => {
    const state = given(limitDefined('gpu', 1), granted(grant()));
    evolve(state, { seq: 2, event: granted(grant()) });
    expect(state.anomalyCount).toBe(0);
    expect(state.liveCount).toBe(1);
  });
});

describe('snapshots', () => {
  it('restores the same state it was taken of, through JSON', () => {
    const state = given(
      limitDefined('gpu', 3),
      granted(grant({ idempotencyKey: 'k', metadata: { job: 7 } })),
      granted(grant({ leaseId: 'b', requester: 'r2', fencingToken: 2 })),
      released('b'),
      renewed('lease-1', T0 + 5),
      revoked('ghost', 0),
    );
    const restored = stateFromSnapshot(JSON.parse(JSON.stringify(snapshotOf(state))));
    expect(restored.ok && restored.state).toEqual(state);
  });

  it('refuses a snapshot that is not one', () => {
    expect(stateFromSnapshot({ v: 1, lastSeq: 'x' })).toMatchObject({ ok: false });
  });

  it('stores each distinct slot claim once, and refuses a version 1 snapshot, ragged columns or a missing claim', () => {
    const state = given(
      limitDefined('gpu', 3),
      granted(grant()),
      granted(grant({ leaseId: 'b', requester: 'r2', fencingToken: 2 })),
    );
    const json = JSON.parse(JSON.stringify(snapshotOf(state)));
    expect(json.slotClaims).toEqual([[['gpu', 1]]]);
    expect(json.leases.slots).toEqual([0, 0]);
    const restored = stateFromSnapshot(json);
    expect(restored.ok && restored.state.leases.get('b')?.slots).toBe(
      restored.ok && restored.state.leases.get('lease-1')?.slots,
    );
    expect(stateFromSnapshot({ ...json, v: 1 })).toMatchObject({ ok: false });
    const ragged = { ...json, leases: { ...json.leases, status: ['live'] } };
    expect(stateFromSnapshot(ragged)).toEqual({ ok: false, message: 'leases.status has 1 entries, not 2' });
    const missing = { ...json, leases: { ...json.leases, slots: [0, 1] } };
    expect(stateFromSnapshot(missing)).toEqual({ ok: false, message: 'leases.slots[1] names no slot claim' });
  });
});

describe('the decode boundary', () => {
  it('round-trips every event', () => {
    const event = granted(grant({ metadata: { a: [1, 'b'] } }));
    expect(decodeEvent(encodeEvent(event))).toEqual({ ok: true, event });
  });

  it('reports corrupt bytes, unknown types, unknown versions and invalid bodies without throwing', () => {
    expect(decodeEvent(new Uint8Array([0xff, 0xfe]))).toMatchObject({ ok: false, problem: 'corrupt' });
    expect(decodeEvent('[1,2]')).toMatchObject({ ok: false, problem: 'corrupt' });
    expect(decodeEvent('{"type":"LeaseTeleported","v":1}')).toMatchObject({
      ok: false,
      problem: 'unknown-type',
    });
    expect(decodeEvent('{"type":"LeaseReleased","v":2,"atMs":1,"leaseId":"a"}')).toMatchObject({
      ok: false,
      problem: 'unknown-version',
    });
    expect(decodeEvent('{"type":"LeaseReleased","v":1,"atMs":-1,"leaseId":"a"}')).toMatchObject({
      ok: false,
      problem: 'invalid',
    });
  });

  it('starts from an empty state', () => {
    expect(initialState()).toMatchObject({ lastSeq: 0, liveCount: 0, anomalyCount: 0, defaultLeasesMax: 1 });
  });
});

describe('the queue of ended leases', () => {
  it('hands ids back oldest first, and compares by its ids alone', () => {
    const a = new EndedQueue();
    const b = new EndedQueue();
    for (let i = 0; i < 5_000; i++) a.push(`L${i}`);
    for (let i = 0; i < 4_000; i++) expect(a.shift()).toBe(`L${i}`);
    for (let i = 4_000; i < 5_000; i++) b.push(`L${i}`);
    expect(a.size).toBe(1_000);
    expect(a).toEqual(b);
    b.push('extra');
    expect(a).not.toEqual(b);
  });
});
