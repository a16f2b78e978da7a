import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  type AcquireLease,
  decide,
  decideAcquisitions,
  decideQueue,
  evolve,
  fold,
  initialState,
  isAdmissionEvent,
  type LeaseCommand,
  type LeaseEvent,
  type LeaseState,
  leasesMaxFor,
  type StoredEvent,
  snapshotOf,
  stateFromSnapshot,
} from '../src/index.js';
import { OTHER_SECRET, SECRET, T0 } from './helpers.js';

/**
 * Random command sequences from several writers with stale views and skewed clocks,
 * appended through a model of JetStream's compare-and-append (expected last sequence per
 * subject). After every step the invariants of DESIGN.md hold on the log: 1 (no limit
 * oversubscribed), 2 (no requester over its limit), 3 (no revocation after an unseen
 * renewal), and at the end 7 (replays, twice, with duplicates, or from a snapshot, agree).
 * fast-check prints the seed of a failing run; FC_SEED=<seed> replays it.
 */

const LIMITS = ['a', 'b'] as const;
const REQUESTERS = ['r0', 'r1', 'r2', 'r3'] as const;
const WRITERS = 3;

type Step =
  | {
      kind: 'acquire';
      writer: number;
      requester: number;
      limit: number;
      count: number;
      ttlMs: number;
      key: number | null;
    }
  | { kind: 'batch'; writer: number; requesters: number[]; limit: number }
  | { kind: 'renew'; writer: number; lease: number; ttlMs: number | null; wrongSecret: boolean }
  | { kind: 'release'; writer: number; lease: number }
  | { kind: 'revoke'; writer: number; lease: number; reason: 'expired' | 'admin' }
  | { kind: 'resize'; writer: number; limit: number; slotsMax: number }
  | { kind: 'requesterLimit'; writer: number; requester: number | null; leasesMax: number }
  | { kind: 'wait'; writer: number; requester: number; limit: number }
  | { kind: 'serveHead'; writer: number }
  | { kind: 'catchUp'; writer: number; events: number }
  | { kind: 'advance'; ms: number };

const writer = fc.integer({ min: 0, max: WRITERS - 1 });
const stepArb: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constant('acquire' as const),
      writer,
      requester: fc.nat(3),
      limit: fc.nat(1),
      count: fc.integer({ min: 1, max: 3 }),
      ttlMs: fc.constantFrom(500, 5_000, 30_000),
      key: fc.option(fc.nat(2)),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('batch' as const),
      writer,
      requesters: fc.array(fc.nat(3), { minLength: 1, maxLength: 4 }),
      limit: fc.nat(1),
    }),
  },
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant('renew' as const),
      writer,
      lease: fc.nat(20),
      ttlMs: fc.option(fc.constantFrom(2_000, 20_000)),
      wrongSecret: fc.boolean(),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('release' as const), writer, lease: fc.nat(20) }) },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('revoke' as const),
      writer,
      lease: fc.nat(20),
      reason: fc.constantFrom('expired' as const, 'admin' as const),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('resize' as const),
      writer,
      limit: fc.nat(1),
      slotsMax: fc.integer({ min: 1, max: 5 }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('requesterLimit' as const),
      writer,
      requester: fc.option(fc.nat(3)),
      leasesMax: fc.integer({ min: 1, max: 3 }),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('wait' as const),
      writer,
      requester: fc.nat(3),
      limit: fc.nat(1),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('serveHead' as const), writer }) },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('catchUp' as const),
      writer,
      events: fc.integer({ min: 1, max: 5 }),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 20_000 }) }),
  },
);

/** JetStream's compare-and-append on one stream, reduced to what the design relies on. */
class ConditionalLog {
  readonly messages: { seq: number; subject: string; event: LeaseEvent }[] = [];
  private readonly lastBySubject = new Map<string, number>();

  append(subject: string, expectedLastSubjectSeq: number, event: LeaseEvent): boolean {
    if ((this.lastBySubject.get(subject) ?? 0) !== expectedLastSubjectSeq) return false;
    const seq = this.messages.length + 1;
    this.messages.push({ seq, subject, event });
    this.lastBySubject.set(subject, seq);
    return true;
  }

  stored(): StoredEvent[] {
    return this.messages.map(({ seq, event }) => ({ seq, event }));
  }
}

const subjectOf = (event: LeaseEvent) =>
  isAdmissionEvent(event) ? 'admission' : `lease.${(event as { leaseId: string }).leaseId}`;

const expectationOf = (view: LeaseState, event: LeaseEvent): number =>
  isAdmissionEvent(event)
    ? view.admissionSeq
    : (view.leases.get((event as { leaseId: string }).leaseId)?.lastSubjectSeq ?? 0);

const catchUp = (view: LeaseState, log: ConditionalLog, max = Number.POSITIVE_INFINITY) => {
  for (const message of log.messages.slice(view.lastSeq, view.lastSeq + max)) evolve(view, message);
};

const checkInvariants = (state: LeaseState) => {
  expect(state.anomalyCount, JSON.stringify(state.anomalies)).toBe(0);
  const used = new Map<string, number>();
  const live = new Map<string, number>();
  for (const lease of state.leases.values()) {
    if (lease.status !== 'live') continue;
    for (const claim of lease.slots) used.set(claim.limit, (used.get(claim.limit) ?? 0) + claim.count);
    live.set(lease.requester, (live.get(lease.requester) ?? 0) + 1);
  }
  for (const [name, limit] of state.limits) {
    expect(limit.used).toBe(used.get(name) ?? 0);
    expect(limit.used).toBeLessThanOrEqual(limit.slotsMax); // invariant 1
  }
  for (const [requester, count] of live) expect(count).toBeLessThanOrEqual(leasesMaxFor(state, requester)); // invariant 2
};

/** Invariant 3, read off the log itself: every revocation names the lease's last sequence before it. */
const checkRevocations = (log: ConditionalLog) => {
  const lastOnLease = new Map<string, number>();
  for (const { seq, subject, event } of log.messages) {
    if (event.type === 'LeaseRevoked')
      expect(event.decidedAgainstSeq).toBe(lastOnLease.get(event.leaseId) ?? 0);
    if (subject.startsWith('lease.')) lastOnLease.set(subject.slice('lease.'.length), seq);
  }
};

const run = (steps: Step[], skewsMs: number[]) => {
  const log = new ConditionalLog();
  const truth = initialState();
  const views = Array.from({ length: WRITERS }, () => initialState());
  let wallMs = T0;
  let nextLease = 0;
  const issued: string[] = [];

  // Every writer decides on its own view; a rejected append means: catch up, decide again (once).
  const attempt = (w: number, build: (view: LeaseState, nowMs: number) => LeaseEvent | null) => {
    const view = views[w]!;
    for (let tries = 0; tries < 2; tries++) {
      const event = build(view, wallMs + skewsMs[w]!);
      if (!event) return;
      if (log.append(subjectOf(event), expectationOf(view, event), event)) {
        catchUp(truth, log);
        catchUp(view, log);
        return;
      }
      catchUp(view, log);
    }
  };
  const decided = (view: LeaseState, command: LeaseCommand): LeaseEvent | null => {
    const decision = decide(view, command);
    if (!decision.ok) return null;
    expect(decision.events.length).toBeLessThanOrEqual(1);
    return decision.events[0] ?? null;
  };
  const acquireCommand = (
    requester: number,
    limit: number,
    count: number,
    ttlMs: number,
    nowMs: number,
    key?: number | null,
  ): AcquireLease => {
    const leaseId = `L${nextLease++}`;
    issued.push(leaseId);
    return {
      type: 'AcquireLease',
      leaseId,
      leaseIdChosen: false,
      requester: REQUESTERS[requester]!,
      slots: [{ limit: LIMITS[limit]!, count }],
      ttlMs,
      secretHash: SECRET,
      ...(key === null || key === undefined ? {} : { idempotencyKey: `k${key}` }),
      nowMs,
    };
  };
  const leaseAt = (index: number) => issued[index % Math.max(issued.length, 1)] ?? 'none';

  for (const limit of LIMITS)
    attempt(0, (v, nowMs) => decided(v, { type: 'DefineLimit', limit, slotsMax: 3, nowMs }));
  for (const step of steps) {
    switch (step.kind) {
      case 'advance':
        wallMs += step.ms;
        break;
      case 'catchUp':
        catchUp(views[step.writer]!, log, step.events);
        break;
      case 'acquire':
        attempt(step.writer, (v, nowMs) =>
          decided(v, acquireCommand(step.requester, step.limit, step.count, step.ttlMs, nowMs, step.key)),
        );
        break;
      case 'batch':
        attempt(
          step.writer,
          (v, nowMs) =>
            decideAcquisitions(
              v,
              step.requesters.map((r) => acquireCommand(r, step.limit, 1, 5_000, nowMs)),
            ).event,
        );
        break;
      case 'wait':
        // An acquire that may wait: granted now, or queued behind earlier waiters.
        attempt(step.writer, (v, nowMs) => {
          const command = {
            ...acquireCommand(step.requester, step.limit, 1, 5_000, nowMs),
            waitUntilMs: nowMs + 5_000,
          };
          return decideAcquisitions(v, [command]).event ?? decideQueue(v, [command]).event;
        });
        break;
      case 'serveHead':
        // The head waiter's owner tries it again, as a gateway does when slots may have freed.
        attempt(step.writer, (v, nowMs) => {
          const head = [...v.waiters.values()][0];
          if (!head) return null;
          const command: AcquireLease = {
            type: 'AcquireLease',
            leaseId: head.leaseId,
            leaseIdChosen: false,
            requester: head.requester,
            slots: head.slots,
            ttlMs: 5_000,
            secretHash: head.secretHash,
            nowMs,
          };
          return decideAcquisitions(v, [command]).event;
        });
        break;
      case 'renew':
        attempt(step.writer, (v, nowMs) =>
          decided(v, {
            type: 'RenewLease',
            leaseId: leaseAt(step.lease),
            secretHash: step.wrongSecret ? OTHER_SECRET : SECRET,
            ttlMs: step.ttlMs ?? undefined,
            nowMs,
          }),
        );
        break;
      case 'release':
        attempt(step.writer, (v, nowMs) =>
          decided(v, { type: 'ReleaseLease', leaseId: leaseAt(step.lease), secretHash: SECRET, nowMs }),
        );
        break;
      case 'revoke':
        attempt(step.writer, (v, nowMs) =>
          decided(v, {
            type: 'RevokeLease',
            leaseId: leaseAt(step.lease),
            reason: step.reason,
            graceMs: 1_000,
            nowMs,
          }),
        );
        break;
      case 'resize':
        attempt(step.writer, (v, nowMs) =>
          decided(v, { type: 'DefineLimit', limit: LIMITS[step.limit]!, slotsMax: step.slotsMax, nowMs }),
        );
        break;
      case 'requesterLimit':
        attempt(step.writer, (v, nowMs) =>
          decided(v, {
            type: 'SetRequesterLimit',
            requester: step.requester === null ? '*' : REQUESTERS[step.requester]!,
            leasesMax: step.leasesMax,
            nowMs,
          }),
        );
        break;
    }
    checkInvariants(truth);
  }
  return { log, truth };
};

const runs = { numRuns: 300, ...(process.env.FC_SEED ? { seed: Number(process.env.FC_SEED) } : {}) };
const scenario = fc.tuple(
  fc.array(stepArb, { minLength: 1, maxLength: 80 }),
  fc.array(fc.integer({ min: -2_000, max: 2_000 }), { minLength: WRITERS, maxLength: WRITERS }),
);

describe('invariants under random commands, stale writers and skewed clocks', () => {
  it('keeps invariants 1, 2 and 3 after every step', () => {
    fc.assert(
      fc.property(scenario, ([steps, skews]) => {
        const { log } = run(steps, skews);
        checkRevocations(log);
      }),
      runs,
    );
  });

  it('rebuilds the same state from the log: once, twice, with duplicated deliveries, and from any snapshot (invariant 7)', () => {
    fc.assert(
      fc.property(scenario, fc.nat(), fc.array(fc.nat(), { maxLength: 20 }), ([steps, skews], cut, dupes) => {
        const { log, truth } = run(steps, skews);
        const stored = log.stored();
        expect(fold(initialState(), stored)).toEqual(truth);
        expect(fold(fold(initialState(), stored), stored)).toEqual(truth);

        const withDuplicates: StoredEvent[] = [];
        for (const [index, message] of stored.entries()) {
          withDuplicates.push(message);
          if (dupes.includes(index)) withDuplicates.push(message, stored[Math.max(0, index - 1)]!);
        }
        expect(fold(initialState(), withDuplicates)).toEqual(truth);

        const at = stored.length === 0 ? 0 : cut % stored.length;
        const snapshot = JSON.parse(JSON.stringify(snapshotOf(fold(initialState(), stored.slice(0, at)))));
        const restored = stateFromSnapshot(snapshot);
        expect(restored.ok).toBe(true);
        if (restored.ok) expect(fold(restored.state, stored.slice(at))).toEqual(truth);
      }),
      { ...runs, numRuns: 150 },
    );
  });
});
