import { describe, expect, it } from 'vitest';
import {
  AcquireRequestV1,
  DEFAULT_POLICY,
  decide,
  decideAcquisitions,
  parseRequest,
  type SetRequesterLimit,
} from '../src/index.js';
import {
  acquire,
  commit,
  defineLimit,
  expectLeaseError,
  given,
  limitDefined,
  OTHER_SECRET,
  release,
  renew,
  revoke,
  T0,
} from './helpers.js';

const setRequesterLimit = (requester: string, leasesMax: number): SetRequesterLimit => ({
  type: 'SetRequesterLimit',
  requester,
  leasesMax,
  nowMs: T0,
});

describe('limits', () => {
  it('defines a new limit', () => {
    const decision = decide(given(), defineLimit('gpu', 4));
    expect(decision).toMatchObject({
      ok: true,
      events: [{ type: 'LimitDefined', limit: 'gpu', slotsMax: 4 }],
    });
  });

  it('treats defining a limit again at the same size as done, with no event', () => {
    expect(decide(given(limitDefined('gpu', 4)), defineLimit('gpu', 4))).toEqual({ ok: true, events: [] });
  });

  it('resizes a limit and records the previous size', () => {
    const decision = decide(given(limitDefined('gpu', 4)), defineLimit('gpu', 8));
    expect(decision).toMatchObject({
      ok: true,
      events: [{ type: 'LimitResized', slotsMax: 8, previousSlotsMax: 4 }],
    });
  });

  it('refuses to shrink a limit below the slots its live leases hold', () => {
    const state = commit(
      given(limitDefined('gpu', 4)),
      decide(given(limitDefined('gpu', 4)), acquire({ slots: [{ limit: 'gpu', count: 3 }] })),
    );
    expectLeaseError(decide(state, defineLimit('gpu', 2)), 'LIMIT_IN_USE');
    expect(decide(state, defineLimit('gpu', 3)).ok).toBe(true);
  });

  it('removes an unused limit', () => {
    const decision = decide(given(limitDefined('gpu', 4)), { type: 'RemoveLimit', limit: 'gpu', nowMs: T0 });
    expect(decision).toMatchObject({ ok: true, events: [{ type: 'LimitRemoved', limit: 'gpu' }] });
  });

  it('refuses to remove a limit that does not exist', () => {
    expectLeaseError(decide(given(), { type: 'RemoveLimit', limit: 'gpu', nowMs: T0 }), 'UNKNOWN_LIMIT');
  });

  it('refuses to remove a limit while a live lease holds its slots', () => {
    const state = given(limitDefined('gpu', 4));
    commit(state, decide(state, acquire()));
    expectLeaseError(decide(state, { type: 'RemoveLimit', limit: 'gpu', nowMs: T0 }), 'LIMIT_IN_USE');
  });
});

describe('requester limits', () => {
  it('lets a requester hold more leases once its own limit is raised', () => {
    const state = given(limitDefined('gpu', 4));
    commit(state, decide(state, acquire()));
    expectLeaseError(decide(state, acquire({ leaseId: 'lease-2' })), 'REQUESTER_LIMIT_REACHED');
    commit(state, decide(state, setRequesterLimit('req-1', 2)));
    expect(decide(state, acquire({ leaseId: 'lease-2' })).ok).toBe(true);
  });

  it('applies a global default to requesters without a limit of their own', () => {
    const state = given(limitDefined('gpu', 4));
    commit(state, decide(state, setRequesterLimit('*', 3)));
    commit(state, decide(state, acquire({ leaseId: 'a' })));
    commit(state, decide(state, acquire({ leaseId: 'b' })));
    commit(state, decide(state, acquire({ leaseId: 'c' })));
    expectLeaseError(decide(state, acquire({ leaseId: 'd' })), 'REQUESTER_LIMIT_REACHED');
  });

  it('refuses to lower a requester limit below the leases it holds now', () => {
    const state = given(limitDefined('gpu', 4));
    commit(state, decide(state, setRequesterLimit('req-1', 2)));
    commit(state, decide(state, acquire({ leaseId: 'a' })));
    commit(state, decide(state, acquire({ leaseId: 'b' })));
    expectLeaseError(decide(state, setRequesterLimit('req-1', 1)), 'LIMIT_IN_USE');
  });
});

describe('acquire', () => {
  it('grants free slots with a deadline of now + ttl and the first fencing token', () => {
    const decision = decide(given(limitDefined('gpu', 2)), acquire({ ttlMs: 5_000 }));
    expect(decision).toMatchObject({
      ok: true,
      events: [
        { type: 'LeasesGranted', grants: [{ leaseId: 'lease-1', deadlineMs: T0 + 5_000, fencingToken: 1 }] },
      ],
    });
  });

  it('never grants more slots than a limit has free', () => {
    const state = given(limitDefined('gpu', 2));
    commit(state, decide(state, acquire({ slots: [{ limit: 'gpu', count: 2 }] })));
    expectLeaseError(decide(state, acquire({ leaseId: 'lease-2', requester: 'req-2' })), 'NO_CAPACITY');
  });

  it('grants slots on several limits at once, or none', () => {
    const state = given(limitDefined('gpu', 2), limitDefined('ram', 1));
    commit(
      state,
      decide(state, acquire({ requester: 'x', leaseId: 'x', slots: [{ limit: 'ram', count: 1 }] })),
    );
    const both = acquire({
      slots: [
        { limit: 'gpu', count: 1 },
        { limit: 'ram', count: 1 },
      ],
    });
    expectLeaseError(decide(state, both), 'NO_CAPACITY');
    expect(state.limits.get('gpu')!.used).toBe(0);
  });

  it('refuses more slots than the limit has in all, which no wait can satisfy', () => {
    expectLeaseError(
      decide(given(limitDefined('gpu', 2)), acquire({ slots: [{ limit: 'gpu', count: 3 }] })),
      'SLOTS_EXCEED_LIMIT',
    );
  });

  it('refuses slots on a limit that is not defined', () => {
    expectLeaseError(decide(given(), acquire()), 'UNKNOWN_LIMIT');
  });

  it('refuses a TTL outside the range instead of clamping it', () => {
    const state = given(limitDefined('gpu', 2));
    expectLeaseError(decide(state, acquire({ ttlMs: DEFAULT_POLICY.ttlMinMs - 1 })), 'TTL_OUT_OF_RANGE');
    expectLeaseError(decide(state, acquire({ ttlMs: DEFAULT_POLICY.ttlMaxMs + 1 })), 'TTL_OUT_OF_RANGE');
    expect(decide(state, acquire({ ttlMs: DEFAULT_POLICY.ttlMinMs })).ok).toBe(true);
  });

  it('refuses metadata larger than its cap', () => {
    const metadata = { note: 'x'.repeat(DEFAULT_POLICY.metadataMaxBytes) };
    expectLeaseError(decide(given(limitDefined('gpu', 2)), acquire({ metadata })), 'METADATA_TOO_LARGE');
  });

  it('refuses a caller-chosen lease id that is already in use, even by an ended lease', () => {
    const state = given(limitDefined('gpu', 4));
    commit(state, decide(state, acquire({ leaseId: 'mine', leaseIdChosen: true })));
    commit(state, decide(state, release({ leaseId: 'mine' })));
    expectLeaseError(
      decide(state, acquire({ leaseId: 'mine', leaseIdChosen: true, requester: 'req-2' })),
      'LEASE_ID_IN_USE',
    );
  });

  it('returns the original grant when an idempotency key is replayed, with no new event', () => {
    const state = given(limitDefined('gpu', 4));
    const first = decideAcquisitions(state, [acquire({ idempotencyKey: 'k1' })]);
    commit(state, { ok: true, events: [first.event!] });
    const again = decideAcquisitions(state, [
      acquire({ idempotencyKey: 'k1', leaseId: 'lease-other', nowMs: T0 + 5 }),
    ]);
    expect(again.event).toBeNull();
    expect(again.outcomes[0]).toMatchObject({
      ok: true,
      replayed: true,
      grant: { leaseId: 'lease-1', fencingToken: 1 },
    });
  });

  it('refuses an idempotency key reused for a different request', () => {
    const state = given(limitDefined('gpu', 4));
    commit(state, decide(state, acquire({ idempotencyKey: 'k1' })));
    const other = acquire({ idempotencyKey: 'k1', leaseId: 'lease-2', slots: [{ limit: 'gpu', count: 2 }] });
    expectLeaseError(decide(state, other), 'IDEMPOTENCY_KEY_REUSED');
  });

  it('scopes idempotency keys to their requester', () => {
    const state = given(limitDefined('gpu', 4));
    commit(state, decide(state, acquire({ idempotencyKey: 'k1' })));
    const decision = decide(state, acquire({ idempotencyKey: 'k1', requester: 'req-2', leaseId: 'lease-2' }));
    expect(decision).toMatchObject({ ok: true, events: [{ grants: [{ leaseId: 'lease-2' }] }] });
  });

  it('decides a pass of acquires as one event, each against the grants before it', () => {
    const state = given(limitDefined('gpu', 2));
    const pass = decideAcquisitions(state, [
      acquire({ leaseId: 'a', requester: 'r1' }),
      acquire({ leaseId: 'b', requester: 'r2' }),
      acquire({ leaseId: 'c', requester: 'r3' }),
      acquire({ leaseId: 'd', requester: 'r1' }),
      acquire({ leaseId: 'e', requester: 'r4', idempotencyKey: 'k', nowMs: T0 + 1 }),
    ]);
    expect(pass.event?.grants.map((g) => [g.leaseId, g.fencingToken])).toEqual([
      ['a', 1],
      ['b', 2],
    ]);
    expect(pass.outcomes.map((o) => (o.ok ? 'ok' : o.error.code))).toEqual([
      'ok',
      'ok',
      'NO_CAPACITY',
      'REQUESTER_LIMIT_REACHED',
      'NO_CAPACITY',
    ]);
    expect(pass.event?.atMs).toBe(T0 + 1);
  });

  it('gives every grant a fencing token above every earlier one', () => {
    const state = given(limitDefined('gpu', 8));
    for (const id of ['a', 'b', 'c']) commit(state, decide(state, acquire({ leaseId: id, requester: id })));
    commit(state, decide(state, release({ leaseId: 'b' })));
    commit(state, decide(state, acquire({ leaseId: 'd', requester: 'd' })));
    expect(state.leases.get('d')!.fencingToken).toBe(4);
  });
});

describe('renew', () => {
  const held = () => {
    const state = given(limitDefined('gpu', 2));
    return commit(state, decide(state, acquire({ ttlMs: 30_000 })));
  };

  it('moves the deadline to now + ttl', () => {
    const decision = decide(held(), renew({ nowMs: T0 + 20_000 }));
    expect(decision).toMatchObject({ ok: true, events: [{ type: 'LeaseRenewed', deadlineMs: T0 + 50_000 }] });
  });

  it('takes a new TTL when one is given', () => {
    const decision = decide(held(), renew({ nowMs: T0 + 20_000, ttlMs: 5_000 }));
    expect(decision).toMatchObject({ ok: true, events: [{ ttlMs: 5_000, deadlineMs: T0 + 25_000 }] });
  });

  it('refuses a new TTL outside the range', () => {
    expectLeaseError(decide(held(), renew({ ttlMs: 1 })), 'TTL_OUT_OF_RANGE');
  });

  it('refuses a renewal past the deadline as expired, even before any revocation', () => {
    expectLeaseError(decide(held(), renew({ nowMs: T0 + 30_001 })), 'LEASE_EXPIRED');
    expect(decide(held(), renew({ nowMs: T0 + 30_000 })).ok).toBe(true);
  });

  it("refuses a renewal without the holder's secret", () => {
    expectLeaseError(decide(held(), renew({ secretHash: OTHER_SECRET })), 'FORBIDDEN');
  });

  it('answers an unknown lease as unknown', () => {
    expectLeaseError(decide(held(), renew({ leaseId: 'nope' })), 'UNKNOWN_LEASE');
  });

  it('answers a renewal after a revocation with the final revoked code', () => {
    const state = held();
    commit(state, decide(state, revoke()));
    expectLeaseError(decide(state, renew({ nowMs: T0 + 61_000 })), 'LEASE_REVOKED');
  });

  it('answers a renewal after a release with the final released code', () => {
    const state = held();
    commit(state, decide(state, release()));
    expectLeaseError(decide(state, renew()), 'LEASE_RELEASED');
  });
});

describe('release', () => {
  it('frees the slots and the requester allowance', () => {
    const state = given(limitDefined('gpu', 1));
    commit(state, decide(state, acquire()));
    commit(state, decide(state, release()));
    expect(state.limits.get('gpu')!.used).toBe(0);
    expect(decide(state, acquire({ leaseId: 'lease-2' })).ok).toBe(true);
  });

  it('treats releasing a released lease again as done, with no event', () => {
    const state = given(limitDefined('gpu', 1));
    commit(state, decide(state, acquire()));
    commit(state, decide(state, release()));
    expect(decide(state, release())).toEqual({ ok: true, events: [] });
  });

  it("refuses to release someone else's lease", () => {
    const state = given(limitDefined('gpu', 1));
    commit(state, decide(state, acquire()));
    expectLeaseError(decide(state, release({ secretHash: OTHER_SECRET })), 'FORBIDDEN');
  });

  it('answers a release of a revoked lease as revoked', () => {
    const state = given(limitDefined('gpu', 1));
    commit(state, decide(state, acquire()));
    commit(state, decide(state, revoke({ reason: 'admin', nowMs: T0 })));
    expectLeaseError(decide(state, release()), 'LEASE_REVOKED');
  });
});

describe('revoke', () => {
  const held = () => {
    const state = given(limitDefined('gpu', 1));
    return commit(state, decide(state, acquire({ ttlMs: 30_000 })));
  };

  it('revokes an expired lease once past its deadline plus grace, naming the deadline and the view it saw', () => {
    const decision = decide(held(), revoke({ nowMs: T0 + 31_001, graceMs: 1_000 }));
    expect(decision).toMatchObject({
      ok: true,
      events: [{ type: 'LeaseRevoked', reason: 'expired', deadlineMs: T0 + 30_000, decidedAgainstSeq: 0 }],
    });
  });

  it('refuses an expiry revocation within the grace', () => {
    expectLeaseError(decide(held(), revoke({ nowMs: T0 + 31_000, graceMs: 1_000 })), 'LEASE_NOT_EXPIRED');
  });

  it('lets an admin revoke a lease before its deadline', () => {
    expect(decide(held(), revoke({ reason: 'admin', nowMs: T0 + 1 })).ok).toBe(true);
  });

  it('rejects a revocation written against a view older than the last renewal', () => {
    const state = held();
    const againstSeq = state.leases.get('lease-1')!.lastSubjectSeq;
    commit(state, decide(state, renew({ nowMs: T0 + 29_000 })));
    expectLeaseError(decide(state, revoke({ againstSeq, nowMs: T0 + 120_000 })), 'STALE_VIEW');
  });

  it('frees the slots of the revoked lease', () => {
    const state = held();
    commit(state, decide(state, revoke()));
    expect(state.limits.get('gpu')!.used).toBe(0);
  });

  it('answers a revocation of an unknown lease as unknown, and of a released one as released', () => {
    const state = held();
    expectLeaseError(decide(state, revoke({ leaseId: 'nope' })), 'UNKNOWN_LEASE');
    commit(state, decide(state, release()));
    expectLeaseError(decide(state, revoke()), 'LEASE_RELEASED');
  });
});

describe('requests at the edge', () => {
  const bytes = (value: unknown) =>
    new TextEncoder().encode(typeof value === 'string' ? value : JSON.stringify(value));
  const valid = { requester: 'r', slots: [{ limit: 'gpu', count: 1 }], ttlMs: 1000 };

  it('parses a valid acquire request', () => {
    expect(parseRequest(AcquireRequestV1, bytes(valid))).toMatchObject({ ok: true, value: valid });
  });

  it('refuses malformed JSON as an invalid request', () => {
    expectLeaseError(parseRequest(AcquireRequestV1, bytes('{"requester":')), 'INVALID_REQUEST');
  });

  it('refuses a request that breaks its schema, and an unknown field', () => {
    expectLeaseError(parseRequest(AcquireRequestV1, bytes({ ...valid, ttlMs: -1 })), 'INVALID_REQUEST');
    expectLeaseError(parseRequest(AcquireRequestV1, bytes({ ...valid, tll: 5 })), 'INVALID_REQUEST');
    expectLeaseError(
      parseRequest(AcquireRequestV1, bytes({ ...valid, leaseId: 'has.dot' })),
      'INVALID_REQUEST',
    );
  });

  it('refuses an oversize request before parsing it', () => {
    expectLeaseError(
      parseRequest(AcquireRequestV1, bytes({ ...valid, pad: 'x'.repeat(100) }), 64),
      'PAYLOAD_TOO_LARGE',
    );
  });
});
