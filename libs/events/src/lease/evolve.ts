import { ADMISSION_SUBJECT, leaseIdOfSubject } from '../subjects.js';
import type { Grant, LeaseEvent, StoredEvent, Waiter } from './events.js';
import {
  ANOMALIES_KEPT,
  type Anomaly,
  ENDED_LEASES_KEPT,
  idempotencyIndexKey,
  type LeaseRecord,
  type LeaseState,
  leasesMaxFor,
  liveLeasesOf,
} from './state.js';

/**
 * The fold, and the judge: it never throws, and an event that breaks an invariant (it
 * slipped past a broken check, or was written around the gateway) is not applied but
 * recorded as an anomaly with its sequence. Per-subject sequences are tracked even for
 * such events, because JetStream counts them when it checks the next append.
 */
export const evolve = (state: LeaseState, stored: StoredEvent): LeaseState => {
  const { seq, event } = stored;
  if (seq <= state.lastSeq) return state;
  state.lastSeq = seq;
  switch (event.type) {
    case 'LimitDefined':
    case 'LimitResized':
    case 'LimitRemoved':
    case 'RequesterLimitSet':
      state.admissionSeq = seq;
      foldLimitEvent(state, seq, event);
      pruneWaiters(state, event.atMs);
      return state;
    case 'LeasesGranted':
      state.admissionSeq = seq;
      for (const grant of event.grants) foldGrant(state, seq, event.atMs, grant);
      pruneWaiters(state, event.atMs);
      return state;
    case 'AcquiresQueued':
      state.admissionSeq = seq;
      for (const waiter of event.waiters) foldQueued(state, seq, waiter);
      pruneWaiters(state, event.atMs);
      return state;
    case 'WaitEnded':
      state.admissionSeq = seq;
      // A wait that ended in a grant, then timed out at its owner, is no contradiction.
      state.waiters.delete(event.leaseId);
      pruneWaiters(state, event.atMs);
      return state;
    case 'LeaseRenewed':
    case 'LeaseReleased':
    case 'LeaseRevoked':
      foldLeaseEvent(state, seq, event);
      return state;
    default:
      return unreachable(event, state);
  }
};

/** Folds a whole log from scratch (or onto a snapshot's state). */
export const fold = (state: LeaseState, events: Iterable<StoredEvent>): LeaseState => {
  for (const stored of events) evolve(state, stored);
  return state;
};

type LimitEvent = Extract<
  LeaseEvent,
  { type: 'LimitDefined' | 'LimitResized' | 'LimitRemoved' | 'RequesterLimitSet' }
>;

const foldLimitEvent = (state: LeaseState, seq: number, event: LimitEvent): void => {
  const anomaly = (kind: Anomaly['kind'], message: string, limit?: string) =>
    record(state, { seq, eventType: event.type, kind, message, ...(limit ? { limit } : {}) });
  switch (event.type) {
    case 'LimitDefined': {
      if (state.limits.has(event.limit))
        return anomaly('LIMIT_EXISTS', `limit ${event.limit} is already defined`, event.limit);
      state.limits.set(event.limit, { slotsMax: event.slotsMax, used: 0 });
      return;
    }
    case 'LimitResized': {
      const limit = state.limits.get(event.limit);
      if (!limit) return anomaly('UNKNOWN_LIMIT', `resize of undefined limit ${event.limit}`, event.limit);
      if (event.slotsMax < limit.used) {
        return anomaly(
          'LIMIT_IN_USE',
          `resize of ${event.limit} to ${event.slotsMax} below ${limit.used} used`,
          event.limit,
        );
      }
      limit.slotsMax = event.slotsMax;
      return;
    }
    case 'LimitRemoved': {
      const limit = state.limits.get(event.limit);
      if (!limit) return anomaly('UNKNOWN_LIMIT', `removal of undefined limit ${event.limit}`, event.limit);
      if (limit.used > 0)
        return anomaly('LIMIT_IN_USE', `removal of ${event.limit} with ${limit.used} used`, event.limit);
      state.limits.delete(event.limit);
      return;
    }
    case 'RequesterLimitSet': {
      const over = requestersOverLimit(state, event.requester, event.leasesMax);
      if (over)
        return anomaly('REQUESTER_OVER_LIMIT', `limit ${event.leasesMax} is below ${over}'s live leases`);
      if (event.requester === '*') state.defaultLeasesMax = event.leasesMax;
      else state.requesterLimits.set(event.requester, event.leasesMax);
      return;
    }
    default:
      return unreachable(event, undefined);
  }
};

/** The first requester whose live leases would exceed `leasesMax` under the change, if any. */
export const requestersOverLimit = (
  state: LeaseState,
  requester: string,
  leasesMax: number,
): string | undefined => {
  if (requester !== '*') return liveLeasesOf(state, requester) > leasesMax ? requester : undefined;
  for (const [who, live] of state.liveByRequester) {
    if (!state.requesterLimits.has(who) && live > leasesMax) return who;
  }
  return undefined;
};

const foldGrant = (state: LeaseState, seq: number, atMs: number, grant: Grant): void => {
  const anomaly = (kind: Anomaly['kind'], message: string, limit?: string) =>
    record(state, {
      seq,
      eventType: 'LeasesGranted',
      kind,
      message,
      leaseId: grant.leaseId,
      ...(limit ? { limit } : {}),
    });
  if (state.leases.has(grant.leaseId))
    return anomaly('DUPLICATE_LEASE_ID', `lease id ${grant.leaseId} is already used`);
  if (grant.fencingToken <= state.fencingToken) {
    return anomaly(
      'FENCING_NOT_GROWING',
      `fencing token ${grant.fencingToken} is not above ${state.fencingToken}`,
    );
  }
  for (const claim of grant.slots) {
    const limit = state.limits.get(claim.limit);
    if (!limit) return anomaly('UNKNOWN_LIMIT', `grant on undefined limit ${claim.limit}`, claim.limit);
    if (limit.used + claim.count > limit.slotsMax) {
      return anomaly(
        'OVERSUBSCRIBED',
        `grant of ${claim.count} on ${claim.limit} with ${limit.used}/${limit.slotsMax} used`,
        claim.limit,
      );
    }
  }
  const live = liveLeasesOf(state, grant.requester);
  const leasesMax = leasesMaxFor(state, grant.requester);
  if (live >= leasesMax) {
    return anomaly('REQUESTER_OVER_LIMIT', `${grant.requester} holds ${live} of ${leasesMax} leases already`);
  }
  for (const claim of grant.slots) state.limits.get(claim.limit)!.used += claim.count;
  state.liveByRequester.set(grant.requester, live + 1);
  state.fencingToken = grant.fencingToken;
  state.liveCount += 1;
  state.leases.set(grant.leaseId, {
    leaseId: grant.leaseId,
    requester: grant.requester,
    holder: grant.holder,
    slots: grant.slots,
    fencingToken: grant.fencingToken,
    secretHash: grant.secretHash,
    idempotencyKey: grant.idempotencyKey,
    metadata: grant.metadata,
    grantedAtMs: atMs,
    grantSeq: seq,
    ttlMs: grant.ttlMs,
    deadlineMs: grant.deadlineMs,
    renewals: 0,
    lastSubjectSeq: 0,
    status: 'live',
    endedAtMs: undefined,
    endSeq: undefined,
    revokeReason: undefined,
  });
  if (grant.idempotencyKey !== undefined) {
    state.idempotency.set(idempotencyIndexKey(grant.requester, grant.idempotencyKey), grant.leaseId);
  }
  state.waiters.delete(grant.leaseId);
};

const foldQueued = (state: LeaseState, seq: number, waiter: Waiter): void => {
  const anomaly = (kind: Anomaly['kind'], message: string, limit?: string) =>
    record(state, {
      seq,
      eventType: 'AcquiresQueued',
      kind,
      message,
      leaseId: waiter.leaseId,
      ...(limit ? { limit } : {}),
    });
  if (state.leases.has(waiter.leaseId) || state.waiters.has(waiter.leaseId)) {
    return anomaly('DUPLICATE_LEASE_ID', `lease id ${waiter.leaseId} is already used or waiting`);
  }
  const unknown = waiter.slots.find((claim) => !state.limits.has(claim.limit));
  if (unknown) return anomaly('UNKNOWN_LIMIT', `waiter on undefined limit ${unknown.limit}`, unknown.limit);
  state.waiters.set(waiter.leaseId, {
    leaseId: waiter.leaseId,
    requester: waiter.requester,
    slots: waiter.slots,
    secretHash: waiter.secretHash,
    expiresAtMs: waiter.expiresAtMs,
    owner: waiter.owner,
    queuedSeq: seq,
  });
};

/** Waiters past their expiry hold no place any more; dropping them at event time keeps replay deterministic. */
const pruneWaiters = (state: LeaseState, atMs: number): void => {
  for (const [leaseId, waiter] of state.waiters) if (waiter.expiresAtMs < atMs) state.waiters.delete(leaseId);
};

type LeaseLifecycleEvent = Extract<LeaseEvent, { type: 'LeaseRenewed' | 'LeaseReleased' | 'LeaseRevoked' }>;

const foldLeaseEvent = (state: LeaseState, seq: number, event: LeaseLifecycleEvent): void => {
  const lease = state.leases.get(event.leaseId);
  const anomaly = (kind: Anomaly['kind'], message: string) =>
    record(state, { seq, eventType: event.type, kind, message, leaseId: event.leaseId });
  if (!lease) return anomaly('UNKNOWN_LEASE', `${event.type} of unknown lease ${event.leaseId}`);
  const seenSeq = lease.lastSubjectSeq;
  lease.lastSubjectSeq = seq;
  if (lease.status !== 'live') {
    return anomaly('AFTER_END', `${event.type} of lease ${event.leaseId} after it was ${lease.status}`);
  }
  switch (event.type) {
    case 'LeaseRenewed':
      if (event.atMs > lease.deadlineMs) {
        return anomaly(
          'RENEWAL_AFTER_DEADLINE',
          `renewal at ${event.atMs} after deadline ${lease.deadlineMs}`,
        );
      }
      lease.ttlMs = event.ttlMs;
      lease.deadlineMs = event.deadlineMs;
      lease.renewals += 1;
      return;
    case 'LeaseReleased':
      return endLease(state, lease, seq, event.atMs, 'released', undefined);
    case 'LeaseRevoked':
      if (event.decidedAgainstSeq !== seenSeq) {
        return anomaly(
          'STALE_REVOCATION',
          `revocation decided against seq ${event.decidedAgainstSeq}, but the lease's last event is seq ${seenSeq}`,
        );
      }
      return endLease(state, lease, seq, event.atMs, 'revoked', event.reason);
    default:
      return unreachable(event, undefined);
  }
};

const endLease = (
  state: LeaseState,
  lease: LeaseRecord,
  seq: number,
  atMs: number,
  status: 'released' | 'revoked',
  reason: LeaseRecord['revokeReason'],
): void => {
  for (const claim of lease.slots) {
    const limit = state.limits.get(claim.limit);
    if (limit) limit.used -= claim.count;
  }
  const live = liveLeasesOf(state, lease.requester) - 1;
  if (live > 0) state.liveByRequester.set(lease.requester, live);
  else state.liveByRequester.delete(lease.requester);
  state.liveCount -= 1;
  lease.status = status;
  lease.endedAtMs = atMs;
  lease.endSeq = seq;
  lease.revokeReason = reason;
  lease.metadata = undefined;
  state.endedOrder.push(lease.leaseId);
  pruneEnded(state);
};

/** Deterministic: the same log always keeps the same ended leases. */
const pruneEnded = (state: LeaseState): void => {
  while (state.endedOrder.size > ENDED_LEASES_KEPT) {
    const oldest = state.endedOrder.shift()!;
    const lease = state.leases.get(oldest);
    state.leases.delete(oldest);
    if (lease?.idempotencyKey !== undefined) {
      state.idempotency.delete(idempotencyIndexKey(lease.requester, lease.idempotencyKey));
    }
  }
};

const record = (state: LeaseState, anomaly: Anomaly): void => {
  state.anomalyCount += 1;
  state.anomalies.push(anomaly);
  if (state.anomalies.length > ANOMALIES_KEPT) state.anomalies.shift();
};

/** Exhaustiveness is checked by the compiler; at run time an impossible value is ignored, never thrown. */
const unreachable = <T>(_value: never, result: T): T => result;

/**
 * A message that could not be decoded is still a message: JetStream counts it on its
 * subject, so the state must too, or every later append on that subject would be
 * rejected. Nothing else of it is applied; the caller logs and counts it.
 */
export const skipUndecodable = (state: LeaseState, seq: number, subject: string): LeaseState => {
  if (seq <= state.lastSeq) return state;
  state.lastSeq = seq;
  if (subject === ADMISSION_SUBJECT) {
    state.admissionSeq = seq;
    return state;
  }
  const leaseId = leaseIdOfSubject(subject);
  const lease = leaseId === undefined ? undefined : state.leases.get(leaseId);
  if (lease) lease.lastSubjectSeq = seq;
  return state;
};
