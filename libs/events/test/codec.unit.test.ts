import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  compiled,
  decodeEvent,
  JSON_SCHEMA_GROUPS,
  LeaseEventV1,
  okReply,
  SnapshotV2,
  versionedSchemas,
} from '../src/index.js';
import { SECRET, T0 } from './helpers.js';

/** Valid events (one with keys the schema does not know) and invalid ones of every kind the schema checks. */
const grant = {
  leaseId: 'l-1',
  requester: 'r-1',
  slots: [{ limit: 'gpu', count: 2 }],
  ttlMs: 1_000,
  deadlineMs: T0 + 1_000,
  fencingToken: 7,
  secretHash: SECRET,
  metadata: { job: 'train', tags: ['a', 1, null, { deep: true }] },
};
const CASES: readonly unknown[] = [
  { type: 'LeasesGranted', v: 1, atMs: T0, grants: [grant] },
  { type: 'LeasesGranted', v: 1, atMs: T0, grants: [{ ...grant, extra: 1 }], extra: 'dropped' },
  { type: 'LeaseRenewed', v: 1, atMs: T0, leaseId: 'l-1', ttlMs: 5, deadlineMs: T0 + 5, actor: 'gw-1' },
  {
    type: 'LeaseRevoked',
    v: 1,
    atMs: T0,
    leaseId: 'l-1',
    reason: 'expired',
    deadlineMs: T0,
    decidedAgainstSeq: 0,
  },
  { type: 'WaitEnded', v: 1, atMs: T0, leaseId: 'l-1', reason: 'timed-out' },
  { type: 'LeasesGranted', v: 1, atMs: T0, grants: [] },
  { type: 'LeasesGranted', v: 1, atMs: T0, grants: [{ ...grant, slots: [grant.slots[0], grant.slots[0]] }] },
  { type: 'LeasesGranted', v: 1, atMs: T0, grants: [{ ...grant, secretHash: 'not-hex' }] },
  { type: 'LeasesGranted', v: 1, atMs: T0, grants: [{ ...grant, metadata: [1] }] },
  { type: 'LeaseRenewed', v: 1, atMs: T0, leaseId: 'has.dot', ttlMs: 5, deadlineMs: T0 },
  { type: 'LeaseRenewed', v: 1, atMs: 1.5, leaseId: 'l-1', ttlMs: 5, deadlineMs: T0 },
  {
    type: 'LeaseRevoked',
    v: 1,
    atMs: T0,
    leaseId: 'l-1',
    reason: 'bored',
    deadlineMs: T0,
    decidedAgainstSeq: 0,
  },
  { type: 'LeaseReleased', v: 1, atMs: T0 },
  { type: 'LimitDefined', v: 1, atMs: T0, limit: 'gpu', slotsMax: 0 },
];

describe('the compiled fast path', () => {
  it('covers every schema of the wire and the snapshot (none holds a reference cycle)', () => {
    const schemas = [
      ...JSON_SCHEMA_GROUPS.flatMap((group) => Object.entries(versionedSchemas(group))),
      ['SnapshotV2', SnapshotV2] as const,
      ['okReply', okReply(z.object({ a: z.number() }))] as const,
    ];
    expect(schemas.length).toBeGreaterThan(30);
    const refused = schemas.filter(([, schema]) => {
      try {
        z.compile(schema, { strict: true });
        return false;
      } catch {
        return true;
      }
    });
    expect(refused.map(([name]) => name)).toEqual([]);
  });

  it('gives the runtime parser answers, valid or not, and drops unknown keys the same way', () => {
    const fast = compiled(LeaseEventV1);
    expect(fast).not.toBe(LeaseEventV1);
    expect(compiled(LeaseEventV1)).toBe(fast);
    let valid = 0;
    for (const input of CASES) {
      const runtime = LeaseEventV1.safeParse(input);
      const fastResult = fast.safeParse(input);
      expect(fastResult.success, JSON.stringify(input)).toBe(runtime.success);
      if (runtime.success) {
        valid += 1;
        expect(fastResult.data).toEqual(runtime.data);
        expect(fastResult.data).not.toHaveProperty('extra');
      } else {
        expect(fastResult.error?.issues).toEqual(runtime.error.issues);
      }
    }
    expect(valid).toBe(5);
  });

  it('is what the decode boundary uses: an invalid event still names its problem', () => {
    const bytes = JSON.stringify(CASES[6]);
    expect(decodeEvent(bytes)).toMatchObject({ ok: false, problem: 'invalid' });
    expect(decodeEvent(JSON.stringify(CASES[0]))).toEqual({ ok: true, event: CASES[0] });
  });
});
