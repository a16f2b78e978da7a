import { type LeaseError, leaseError } from '../errors.js';
import type {
  AcquireLease,
  DefineLimit,
  EndWait,
  LeaseCommand,
  Policy,
  ReleaseLease,
  RemoveLimit,
  RenewLease,
  RevokeLease,
  SetRequesterLimit,
} from './commands.js';
import { DEFAULT_POLICY, WAITERS_PER_LIMIT_MAX } from './commands.js';
import type { AcquiresQueued, Grant, LeaseEvent, LeasesGranted, Waiter } from './events.js';
import { requestersOverLimit } from './evolve.js';
import {
  idempotencyIndexKey,
  type LeaseRecord,
  type LeaseState,
  leasesMaxFor,
  liveLeasesOf,
  waitersAhead,
} from './state.js';

export type Decision = { ok: true; events: LeaseEvent[] } | { ok: false; error: LeaseError };

/** The outcome of one acquire: a new grant, the original grant for a replayed idempotency key, or a refusal. */
export type AcquireOutcome = { ok: true; grant: Grant; replayed: boolean } | { ok: false; error: LeaseError };

export interface AcquireDecision {
  /** One event carrying every grant of the pass, or null when nothing new was granted. */
  readonly event: LeasesGranted | null;
  readonly outcomes: AcquireOutcome[];
}

const refuse = (error: LeaseError) => ({ ok: false as const, error });
const accept = (...events: LeaseEvent[]): Decision => ({ ok: true, events });

/**
 * decide(state, command) -> events | LeaseError. Pure: time, ids and the secret's hash
 * arrive in the command; the state is read, never written.
 */
export const decide = (
  state: LeaseState,
  command: LeaseCommand,
  policy: Policy = DEFAULT_POLICY,
): Decision => {
  switch (command.type) {
    case 'DefineLimit':
      return decideDefineLimit(state, command);
    case 'RemoveLimit':
      return decideRemoveLimit(state, command);
    case 'SetRequesterLimit':
      return decideSetRequesterLimit(state, command);
    case 'AcquireLease': {
      const { event, outcomes } = decideAcquisitions(state, [command], policy);
      const outcome = outcomes[0]!;
      if (!outcome.ok) return outcome;
      return accept(...(event ? [event] : []));
    }
    case 'RenewLease':
      return decideRenew(state, command, policy);
    case 'ReleaseLease':
      return decideRelease(state, command);
    case 'RevokeLease':
      return decideRevoke(state, command);
    case 'EndWait':
      return decideEndWait(state, command);
    default: {
      const unknown: never = command;
      return refuse(leaseError('INVALID_REQUEST', `unknown command ${JSON.stringify(unknown)}`));
    }
  }
};

const decideDefineLimit = (state: LeaseState, command: DefineLimit): Decision => {
  const existing = state.limits.get(command.limit);
  const meta = { atMs: command.nowMs, ...(command.actor ? { actor: command.actor } : {}), v: 1 as const };
  if (!existing)
    return accept({ type: 'LimitDefined', ...meta, limit: command.limit, slotsMax: command.slotsMax });
  if (existing.slotsMax === command.slotsMax) return accept();
  if (command.slotsMax < existing.used) {
    return refuse(
      leaseError(
        'LIMIT_IN_USE',
        `limit ${command.limit} has ${existing.used} slots in use, more than ${command.slotsMax}`,
        {
          limit: command.limit,
          used: existing.used,
        },
      ),
    );
  }
  return accept({
    type: 'LimitResized',
    ...meta,
    limit: command.limit,
    slotsMax: command.slotsMax,
    previousSlotsMax: existing.slotsMax,
  });
};

const decideRemoveLimit = (state: LeaseState, command: RemoveLimit): Decision => {
  const existing = state.limits.get(command.limit);
  if (!existing)
    return refuse(leaseError('UNKNOWN_LIMIT', `no limit named ${command.limit}`, { limit: command.limit }));
  if (existing.used > 0) {
    return refuse(
      leaseError('LIMIT_IN_USE', `limit ${command.limit} has ${existing.used} slots in use`, {
        limit: command.limit,
        used: existing.used,
      }),
    );
  }
  return accept({
    type: 'LimitRemoved',
    v: 1,
    atMs: command.nowMs,
    ...(command.actor ? { actor: command.actor } : {}),
    limit: command.limit,
  });
};

const decideSetRequesterLimit = (state: LeaseState, command: SetRequesterLimit): Decision => {
  const over = requestersOverLimit(state, command.requester, command.leasesMax);
  if (over) {
    return refuse(
      leaseError(
        'LIMIT_IN_USE',
        `${over} holds ${liveLeasesOf(state, over)} live leases, more than ${command.leasesMax}`,
        {
          requester: over,
        },
      ),
    );
  }
  return accept({
    type: 'RequesterLimitSet',
    v: 1,
    atMs: command.nowMs,
    ...(command.actor ? { actor: command.actor } : {}),
    requester: command.requester,
    leasesMax: command.leasesMax,
  });
};

/**
 * Decides a pass of acquires in order, each against the state plus the grants decided
 * before it in the same pass, so one append can carry them all (group commit).
 */
export const decideAcquisitions = (
  state: LeaseState,
  commands: readonly AcquireLease[],
  policy: Policy = DEFAULT_POLICY,
): AcquireDecision => {
  const pass = new Pass(state);
  const outcomes = commands.map((command) => decideAcquire(state, pass, command, policy));
  if (pass.grants.length === 0) return { event: null, outcomes };
  const nowMs = Math.max(...commands.map((c) => c.nowMs));
  return { event: { type: 'LeasesGranted', v: 1, atMs: nowMs, grants: pass.grants }, outcomes };
};

/** What the grants decided earlier in a pass add to the state. */
class Pass {
  readonly grants: Grant[] = [];
  readonly usedDelta = new Map<string, number>();
  readonly liveDelta = new Map<string, number>();
  readonly byId = new Map<string, Grant>();
  readonly byKey = new Map<string, Grant>();
  fencingToken: number;

  constructor(state: LeaseState) {
    this.fencingToken = state.fencingToken;
  }

  add(grant: Grant): void {
    this.grants.push(grant);
    for (const claim of grant.slots) {
      this.usedDelta.set(claim.limit, (this.usedDelta.get(claim.limit) ?? 0) + claim.count);
    }
    this.liveDelta.set(grant.requester, (this.liveDelta.get(grant.requester) ?? 0) + 1);
    this.byId.set(grant.leaseId, grant);
    if (grant.idempotencyKey !== undefined) {
      this.byKey.set(idempotencyIndexKey(grant.requester, grant.idempotencyKey), grant);
    }
    this.fencingToken = grant.fencingToken;
  }
}

const decideAcquire = (
  state: LeaseState,
  pass: Pass,
  command: AcquireLease,
  policy: Policy,
): AcquireOutcome => {
  if (command.idempotencyKey !== undefined) {
    const replay = findIdempotent(state, pass, command.requester, command.idempotencyKey);
    if (replay) {
      if (!sameClaims(replay.slots, command.slots)) {
        return refuse(
          leaseError(
            'IDEMPOTENCY_KEY_REUSED',
            `idempotency key ${command.idempotencyKey} was used for other slots`,
            {
              leaseId: replay.leaseId,
            },
          ),
        );
      }
      return { ok: true, grant: replay, replayed: true };
    }
  }
  const waiting = state.waiters.get(command.leaseId);
  const ownWait = waiting !== undefined && isOwnWait(waiting, command);
  if (state.leases.has(command.leaseId) || pass.byId.has(command.leaseId) || (waiting && !ownWait)) {
    return refuse(
      leaseError('LEASE_ID_IN_USE', `lease id ${command.leaseId} is in use`, { leaseId: command.leaseId }),
    );
  }
  const ttlRefusal = checkTtl(command.ttlMs, policy);
  if (ttlRefusal) return refuse(ttlRefusal);
  if (command.metadata !== undefined) {
    const bytes = utf8Length(JSON.stringify(command.metadata));
    if (bytes > policy.metadataMaxBytes) {
      return refuse(
        leaseError('METADATA_TOO_LARGE', `metadata is ${bytes} bytes, more than ${policy.metadataMaxBytes}`, {
          bytes,
          maxBytes: policy.metadataMaxBytes,
        }),
      );
    }
  }
  for (const claim of command.slots) {
    const limit = state.limits.get(claim.limit);
    if (!limit)
      return refuse(leaseError('UNKNOWN_LIMIT', `no limit named ${claim.limit}`, { limit: claim.limit }));
    if (claim.count > limit.slotsMax) {
      return refuse(
        leaseError(
          'SLOTS_EXCEED_LIMIT',
          `${claim.count} slots asked of ${claim.limit}, which has ${limit.slotsMax}`,
          {
            limit: claim.limit,
            slotsMax: limit.slotsMax,
          },
        ),
      );
    }
  }
  const live = liveLeasesOf(state, command.requester) + (pass.liveDelta.get(command.requester) ?? 0);
  const leasesMax = leasesMaxFor(state, command.requester);
  if (live >= leasesMax) {
    return refuse(
      leaseError(
        'REQUESTER_LIMIT_REACHED',
        `${command.requester} already holds ${live} of ${leasesMax} leases`,
        {
          requester: command.requester,
          leasesMax,
        },
      ),
    );
  }
  // First come, first served per limit: nobody overtakes a waiter that still holds its place.
  const ahead = waitersAhead(state, command.leaseId, command.slots, command.nowMs, (id) => pass.byId.has(id));
  if (ahead > 0) {
    return refuse(
      leaseError('NO_CAPACITY', `${ahead} waiting acquires are ahead on these limits`, {
        queuedAhead: ahead,
      }),
    );
  }
  for (const claim of command.slots) {
    const limit = state.limits.get(claim.limit)!;
    const free = limit.slotsMax - limit.used - (pass.usedDelta.get(claim.limit) ?? 0);
    if (claim.count > free) {
      return refuse(
        leaseError('NO_CAPACITY', `${claim.limit} has ${free} free slots, ${claim.count} asked`, {
          limit: claim.limit,
          free,
        }),
      );
    }
  }
  const grant: Grant = {
    leaseId: command.leaseId,
    requester: command.requester,
    ...(command.holder !== undefined ? { holder: command.holder } : {}),
    slots: command.slots.map((claim) => ({ limit: claim.limit, count: claim.count })),
    ttlMs: command.ttlMs,
    deadlineMs: command.nowMs + command.ttlMs,
    fencingToken: pass.fencingToken + 1,
    secretHash: command.secretHash,
    ...(command.idempotencyKey !== undefined ? { idempotencyKey: command.idempotencyKey } : {}),
    ...(command.metadata !== undefined ? { metadata: command.metadata } : {}),
  };
  pass.add(grant);
  return { ok: true, grant, replayed: false };
};

const findIdempotent = (state: LeaseState, pass: Pass, requester: string, key: string): Grant | undefined => {
  const indexKey = idempotencyIndexKey(requester, key);
  const pending = pass.byKey.get(indexKey);
  if (pending) return pending;
  const leaseId = state.idempotency.get(indexKey);
  const lease = leaseId === undefined ? undefined : state.leases.get(leaseId);
  return lease ? grantOf(lease) : undefined;
};

/** The grant as it was decided, rebuilt from the lease record (for replays of an idempotency key). */
export const grantOf = (lease: LeaseRecord): Grant => ({
  leaseId: lease.leaseId,
  requester: lease.requester,
  ...(lease.holder !== undefined ? { holder: lease.holder } : {}),
  slots: lease.slots.map((claim) => ({ ...claim })),
  ttlMs: lease.ttlMs,
  deadlineMs: lease.deadlineMs,
  fencingToken: lease.fencingToken,
  secretHash: lease.secretHash,
  ...(lease.idempotencyKey !== undefined ? { idempotencyKey: lease.idempotencyKey } : {}),
  ...(lease.metadata !== undefined ? { metadata: lease.metadata } : {}),
});

const isOwnWait = (waiter: { requester: string; secretHash: string }, command: AcquireLease): boolean =>
  waiter.requester === command.requester && waiter.secretHash === command.secretHash;

export type QueueOutcome =
  | { ok: true; waiter: Waiter; alreadyQueued: boolean }
  | { ok: false; error: LeaseError };

export interface QueueDecision {
  readonly event: AcquiresQueued | null;
  readonly outcomes: QueueOutcome[];
}

/**
 * Puts acquires that found no free slots into their limits' queues, in order, as one
 * event. An acquire already waiting (its request came back through another replica) keeps
 * its place. Call it for acquires `decideAcquisitions` refused with NO_CAPACITY.
 */
export const decideQueue = (state: LeaseState, commands: readonly AcquireLease[]): QueueDecision => {
  const queued: Waiter[] = [];
  const perLimit = new Map<string, number>();
  for (const waiter of state.waiters.values()) {
    for (const claim of waiter.slots) perLimit.set(claim.limit, (perLimit.get(claim.limit) ?? 0) + 1);
  }
  const outcomes = commands.map((command): QueueOutcome => {
    const existing = state.waiters.get(command.leaseId);
    if (existing && isOwnWait(existing, command)) {
      const { queuedSeq: _seq, owner, ...rest } = existing;
      return {
        ok: true,
        alreadyQueued: true,
        waiter: { ...rest, slots: rest.slots.map((c) => ({ ...c })), ...(owner ? { owner } : {}) },
      };
    }
    if (command.waitUntilMs === undefined || command.waitUntilMs <= command.nowMs) {
      return refuse(leaseError('NO_CAPACITY', 'no free slots, and the acquire does not wait'));
    }
    if (existing || state.leases.has(command.leaseId) || queued.some((w) => w.leaseId === command.leaseId)) {
      return refuse(
        leaseError('LEASE_ID_IN_USE', `lease id ${command.leaseId} is in use`, { leaseId: command.leaseId }),
      );
    }
    const full = command.slots.find((claim) => (perLimit.get(claim.limit) ?? 0) >= WAITERS_PER_LIMIT_MAX);
    if (full) {
      return refuse(
        leaseError('NO_CAPACITY', `the queue of ${full.limit} is full (${WAITERS_PER_LIMIT_MAX} waiting)`, {
          limit: full.limit,
        }),
      );
    }
    for (const claim of command.slots) perLimit.set(claim.limit, (perLimit.get(claim.limit) ?? 0) + 1);
    const waiter: Waiter = {
      leaseId: command.leaseId,
      requester: command.requester,
      slots: command.slots.map((claim) => ({ limit: claim.limit, count: claim.count })),
      secretHash: command.secretHash,
      expiresAtMs: command.waitUntilMs,
      ...(command.owner !== undefined ? { owner: command.owner } : {}),
    };
    queued.push(waiter);
    return { ok: true, alreadyQueued: false, waiter };
  });
  if (queued.length === 0) return { event: null, outcomes };
  const nowMs = Math.max(...commands.map((c) => c.nowMs));
  return { event: { type: 'AcquiresQueued', v: 1, atMs: nowMs, waiters: queued }, outcomes };
};

const decideEndWait = (state: LeaseState, command: EndWait): Decision => {
  const waiter = state.waiters.get(command.leaseId);
  if (!waiter) {
    return refuse(
      leaseError('UNKNOWN_LEASE', `no acquire is waiting as ${command.leaseId}`, {
        leaseId: command.leaseId,
      }),
    );
  }
  if (waiter.secretHash !== command.secretHash) {
    return refuse(
      leaseError('FORBIDDEN', `the wait ${command.leaseId} is someone else's`, { leaseId: command.leaseId }),
    );
  }
  return accept({
    type: 'WaitEnded',
    v: 1,
    atMs: command.nowMs,
    leaseId: command.leaseId,
    reason: command.reason,
  });
};

const sameClaims = (a: Grant['slots'], b: readonly { limit: string; count: number }[]): boolean =>
  a.length === b.length &&
  a.every((claim) => b.some((other) => other.limit === claim.limit && other.count === claim.count));

const checkTtl = (ttlMs: number, policy: Policy): LeaseError | undefined =>
  ttlMs < policy.ttlMinMs || ttlMs > policy.ttlMaxMs
    ? leaseError('TTL_OUT_OF_RANGE', `ttl ${ttlMs} ms is outside ${policy.ttlMinMs}..${policy.ttlMaxMs} ms`, {
        ttlMs,
        ttlMinMs: policy.ttlMinMs,
        ttlMaxMs: policy.ttlMaxMs,
      })
    : undefined;

/**
 * Finds the lease a holder command names and checks its secret; an ended lease answers
 * its end (final) so that a late holder stops, never "unknown".
 */
const holderLease = (
  state: LeaseState,
  command: { leaseId: string; secretHash: string },
): { lease: LeaseRecord } | { error: LeaseError } => {
  const lease = state.leases.get(command.leaseId);
  if (!lease)
    return {
      error: leaseError('UNKNOWN_LEASE', `no lease ${command.leaseId}`, { leaseId: command.leaseId }),
    };
  if (lease.secretHash !== command.secretHash) {
    return {
      error: leaseError('FORBIDDEN', `lease ${command.leaseId} is held by someone else`, {
        leaseId: command.leaseId,
      }),
    };
  }
  return { lease };
};

const endedError = (lease: LeaseRecord): LeaseError =>
  lease.status === 'released'
    ? leaseError('LEASE_RELEASED', `lease ${lease.leaseId} was released`, {
        leaseId: lease.leaseId,
        endSeq: lease.endSeq,
      })
    : leaseError('LEASE_REVOKED', `lease ${lease.leaseId} was revoked (${lease.revokeReason})`, {
        leaseId: lease.leaseId,
        reason: lease.revokeReason,
        endSeq: lease.endSeq,
      });

const decideRenew = (state: LeaseState, command: RenewLease, policy: Policy): Decision => {
  const found = holderLease(state, command);
  if ('error' in found) return refuse(found.error);
  const { lease } = found;
  if (lease.status !== 'live') return refuse(endedError(lease));
  if (command.nowMs > lease.deadlineMs) {
    return refuse(
      leaseError('LEASE_EXPIRED', `lease ${lease.leaseId} passed its deadline ${lease.deadlineMs}`, {
        leaseId: lease.leaseId,
        deadlineMs: lease.deadlineMs,
      }),
    );
  }
  const ttlMs = command.ttlMs ?? lease.ttlMs;
  const ttlRefusal = checkTtl(ttlMs, policy);
  if (ttlRefusal) return refuse(ttlRefusal);
  return accept({
    type: 'LeaseRenewed',
    v: 1,
    atMs: command.nowMs,
    leaseId: lease.leaseId,
    ttlMs,
    deadlineMs: command.nowMs + ttlMs,
  });
};

const decideRelease = (state: LeaseState, command: ReleaseLease): Decision => {
  const found = holderLease(state, command);
  if ('error' in found) return refuse(found.error);
  const { lease } = found;
  // A release retried after an uncertain failure finds the lease released: that is success.
  if (lease.status === 'released') return accept();
  if (lease.status !== 'live') return refuse(endedError(lease));
  return accept({
    type: 'LeaseReleased',
    v: 1,
    atMs: command.nowMs,
    leaseId: lease.leaseId,
    ...(command.detail !== undefined ? { detail: command.detail } : {}),
  });
};

const decideRevoke = (state: LeaseState, command: RevokeLease): Decision => {
  const lease = state.leases.get(command.leaseId);
  if (!lease)
    return refuse(leaseError('UNKNOWN_LEASE', `no lease ${command.leaseId}`, { leaseId: command.leaseId }));
  if (lease.status !== 'live') return refuse(endedError(lease));
  if (command.againstSeq !== undefined && command.againstSeq !== lease.lastSubjectSeq) {
    return refuse(
      leaseError(
        'STALE_VIEW',
        `revocation of ${lease.leaseId} decided against seq ${command.againstSeq}, the lease is at seq ${lease.lastSubjectSeq}`,
        { leaseId: lease.leaseId, againstSeq: command.againstSeq, lastSubjectSeq: lease.lastSubjectSeq },
      ),
    );
  }
  if (command.reason === 'expired' && command.nowMs <= lease.deadlineMs + command.graceMs) {
    return refuse(
      leaseError(
        'LEASE_NOT_EXPIRED',
        `lease ${lease.leaseId} is not past deadline ${lease.deadlineMs} + grace`,
        {
          leaseId: lease.leaseId,
          deadlineMs: lease.deadlineMs,
          graceMs: command.graceMs,
        },
      ),
    );
  }
  return accept({
    type: 'LeaseRevoked',
    v: 1,
    atMs: command.nowMs,
    ...(command.actor !== undefined ? { actor: command.actor } : {}),
    leaseId: lease.leaseId,
    reason: command.reason,
    deadlineMs: lease.deadlineMs,
    decidedAgainstSeq: lease.lastSubjectSeq,
    ...(command.detail !== undefined ? { detail: command.detail } : {}),
  });
};

const utf8 = new TextEncoder();
const utf8Length = (text: string): number => utf8.encode(text).length;
