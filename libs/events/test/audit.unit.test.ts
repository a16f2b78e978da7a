import { describe, expect, it } from 'vitest';
import {
  createAuditor,
  evolve,
  formatFinding,
  type Grant,
  initialState,
  type LeaseEvent,
  type LeaseState,
} from '../src/index.js';
import { SECRET, T0 } from './helpers.js';

const grant = (
  leaseId: string,
  requester: string,
  limit: string,
  count: number,
  fencingToken: number,
): LeaseEvent => ({
  type: 'LeasesGranted',
  v: 1,
  atMs: T0,
  grants: [
    {
      leaseId,
      requester,
      slots: [{ limit, count }],
      ttlMs: 30_000,
      deadlineMs: T0 + 30_000,
      fencingToken,
      secretHash: SECRET,
    } satisfies Grant,
  ],
});

/** Folds the events as the log from seq 1, auditing each; returns what the auditor reported. */
const auditLog = (events: LeaseEvent[], state: LeaseState = initialState()) => {
  const auditor = createAuditor();
  const findings = events.flatMap((event, index) => {
    const stored = { seq: index + 1, event };
    evolve(state, stored);
    return auditor.observe(stored, state);
  });
  return { findings, auditor, state };
};

describe('the audit over a fold', () => {
  it('finds nothing in a log that keeps every invariant', () => {
    const { findings, auditor } = auditLog([
      { type: 'LimitDefined', v: 1, atMs: T0, limit: 'gpu', slotsMax: 2 },
      grant('a', 'r1', 'gpu', 2, 1),
      { type: 'LeaseRenewed', v: 1, atMs: T0 + 1, leaseId: 'a', ttlMs: 30_000, deadlineMs: T0 + 30_001 },
      { type: 'LeaseReleased', v: 1, atMs: T0 + 2, leaseId: 'a' },
      grant('b', 'r1', 'gpu', 2, 2),
    ]);
    expect(findings).toEqual([]);
    expect(auditor.counts()).toEqual({ events: 5, undecodable: 0, findings: 0, byKind: {} });
  });

  it('reports each event the fold refused, with its sequence and kind, as it appears', () => {
    const { findings, auditor } = auditLog([
      { type: 'LimitDefined', v: 1, atMs: T0, limit: 'gpu', slotsMax: 2 },
      grant('a', 'r1', 'gpu', 2, 1),
      grant('b', 'r2', 'gpu', 1, 2),
      {
        type: 'LeaseRevoked',
        v: 1,
        atMs: T0,
        leaseId: 'zz',
        reason: 'expired',
        deadlineMs: T0,
        decidedAgainstSeq: 0,
      },
    ]);
    expect(findings.map((f) => [f.seq, f.kind, f.source])).toEqual([
      [3, 'OVERSUBSCRIBED', 'fold'],
      [4, 'UNKNOWN_LEASE', 'fold'],
    ]);
    expect(auditor.counts().byKind).toEqual({ OVERSUBSCRIBED: 1, UNKNOWN_LEASE: 1 });
    expect(formatFinding(findings[0]!)).toBe(
      'seq 3 OVERSUBSCRIBED (LeasesGranted, lease b, limit gpu): grant of 1 on gpu with 2/2 used',
    );
  });

  it('re-checks the state the fold produced, independently of the fold: a broken fold is caught', () => {
    const state = initialState();
    const auditor = createAuditor();
    const define: LeaseEvent = { type: 'LimitDefined', v: 1, atMs: T0, limit: 'gpu', slotsMax: 1 };
    evolve(state, { seq: 1, event: define });
    auditor.observe({ seq: 1, event: define }, state);
    const first = grant('a', 'r1', 'gpu', 1, 5);
    evolve(state, { seq: 2, event: first });
    expect(auditor.observe({ seq: 2, event: first }, state)).toEqual([]);
    // A fold that forgot to count slots, and to check tokens and the requester limit, would
    // apply this grant; the state it leaves breaks invariants 1 and 2.
    state.limits.get('gpu')!.used = 0;
    state.fencingToken = 0;
    state.defaultLeasesMax = 5;
    const second = grant('b', 'r1', 'gpu', 1, 3);
    evolve(state, { seq: 3, event: second });
    state.limits.get('gpu')!.used = 2;
    state.defaultLeasesMax = 1;
    const findings = auditor.observe({ seq: 3, event: second }, state);
    expect(findings.map((f) => f.kind).sort()).toEqual([
      'STATE_FENCING_NOT_GROWING',
      'STATE_OVERSUBSCRIBED',
      'STATE_REQUESTER_OVER_LIMIT',
    ]);
    expect(findings.every((f) => f.seq === 3 && f.source === 'recheck')).toBe(true);
  });

  it('counts an undecodable message as a finding with its subject and problem', () => {
    const auditor = createAuditor();
    const finding = auditor.problem(7, 'lease.events.lease.x', 'corrupt', 'not UTF-8 JSON');
    expect(formatFinding(finding)).toBe('seq 7 UNDECODABLE corrupt on lease.events.lease.x: not UTF-8 JSON');
    expect(auditor.counts()).toEqual({ events: 0, undecodable: 1, findings: 1, byKind: { UNDECODABLE: 1 } });
  });

  it('says so when one event brought more anomalies than the fold keeps', () => {
    const state = initialState();
    const auditor = createAuditor();
    const event: LeaseEvent = { type: 'LimitRemoved', v: 1, atMs: T0, limit: 'nope' };
    evolve(state, { seq: 1, event });
    state.anomalyCount += 2; // two more than the window lists
    const findings = auditor.observe({ seq: 1, event }, state);
    expect(findings.map((f) => f.kind)).toEqual(['UNKNOWN_LIMIT', 'ANOMALIES_NOT_LISTED']);
  });
});
