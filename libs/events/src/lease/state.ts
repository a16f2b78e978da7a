import type { RevokeReason, SlotClaim } from '../schemas/common.js';
import type { Grant, LeaseEventType } from './events.js';

export interface LimitState {
  slotsMax: number;
  /** Slots held by live leases: only grants add to it, only releases and revocations take away. */
  used: number;
}

export type LeaseStatus = 'live' | 'released' | 'revoked';

export interface LeaseRecord {
  readonly leaseId: string;
  readonly requester: string;
  readonly holder: string | undefined;
  readonly slots: readonly SlotClaim[];
  readonly fencingToken: number;
  readonly secretHash: string;
  readonly idempotencyKey: string | undefined;
  metadata: Grant['metadata'];
  readonly grantedAtMs: number;
  /** Sequence of the admission message that granted it. */
  readonly grantSeq: number;
  ttlMs: number;
  deadlineMs: number;
  renewals: number;
  /** Last stream sequence on this lease's own subject (0: nothing after the grant): what appends expect. */
  lastSubjectSeq: number;
  status: LeaseStatus;
  endedAtMs: number | undefined;
  endSeq: number | undefined;
  revokeReason: RevokeReason | undefined;
}

export const ANOMALY_KINDS = [
  'OVERSUBSCRIBED',
  'REQUESTER_OVER_LIMIT',
  'STALE_REVOCATION',
  'AFTER_END',
  'RENEWAL_AFTER_DEADLINE',
  'FENCING_NOT_GROWING',
  'DUPLICATE_LEASE_ID',
  'UNKNOWN_LEASE',
  'UNKNOWN_LIMIT',
  'LIMIT_EXISTS',
  'LIMIT_IN_USE',
] as const;
export type AnomalyKind = (typeof ANOMALY_KINDS)[number];

export interface WaiterRecord {
  readonly leaseId: string;
  readonly requester: string;
  readonly slots: readonly SlotClaim[];
  readonly secretHash: string;
  readonly expiresAtMs: number;
  readonly owner: string | undefined;
  /** Admission sequence that queued it: the queue's order. */
  readonly queuedSeq: number;
}

/** An event the fold refused to apply because it breaks an invariant: the audit reports it. */
export interface Anomaly {
  readonly seq: number;
  readonly eventType: LeaseEventType;
  readonly kind: AnomalyKind;
  readonly message: string;
  readonly leaseId?: string;
  readonly limit?: string;
}

/**
 * Ended lease ids, oldest first: appended at the end, taken from the front. A Set would
 * do, but taking its first entry steps over every deleted one before it, which made
 * replaying a long log quadratic. Two queues with the same ids compare equal.
 */
export class EndedQueue implements Iterable<string> {
  #ids: string[] = [];
  #head = 0;

  get size(): number {
    return this.#ids.length - this.#head;
  }

  push(leaseId: string): void {
    this.#ids.push(leaseId);
  }

  shift(): string | undefined {
    if (this.#head >= this.#ids.length) return undefined;
    const leaseId = this.#ids[this.#head]!;
    this.#head += 1;
    // Drop the consumed front once it is most of the array: amortized O(1) per id.
    if (this.#head > 1_024 && this.#head * 2 > this.#ids.length) {
      this.#ids = this.#ids.slice(this.#head);
      this.#head = 0;
    }
    return leaseId;
  }

  *[Symbol.iterator](): Iterator<string> {
    for (let i = this.#head; i < this.#ids.length; i++) yield this.#ids[i]!;
  }
}

export const DEFAULT_LEASES_PER_REQUESTER = 1;
/** Ended leases are kept (without metadata) so late renewals hear "released"/"revoked", not "unknown". */
export const ENDED_LEASES_KEPT = 20_000;
/** The anomalies list is a recent window; `anomalyCount` counts them all. */
export const ANOMALIES_KEPT = 1_000;

/**
 * The projection. `evolve` updates it in place (a copy per event would make replaying a
 * million events quadratic), so whoever folds owns it; `decide` only reads it.
 */
export interface LeaseState {
  /** Last stream sequence folded; an event at or below it is a duplicate delivery and is skipped. */
  lastSeq: number;
  /** Last sequence on the admission subject: what the next admission append expects. */
  admissionSeq: number;
  /** Highest fencing token granted. */
  fencingToken: number;
  readonly limits: Map<string, LimitState>;
  /** Live leases and the most recently ended ones (`endedOrder`). */
  readonly leases: Map<string, LeaseRecord>;
  readonly endedOrder: EndedQueue;
  readonly liveByRequester: Map<string, number>;
  readonly requesterLimits: Map<string, number>;
  defaultLeasesMax: number;
  /** Acquires waiting for slots, in queue order (insertion order is admission order). */
  readonly waiters: Map<string, WaiterRecord>;
  /** `${requester}\u0000${idempotencyKey}` to lease id. */
  readonly idempotency: Map<string, string>;
  liveCount: number;
  readonly anomalies: Anomaly[];
  anomalyCount: number;
}

export const initialState = (): LeaseState => ({
  lastSeq: 0,
  admissionSeq: 0,
  fencingToken: 0,
  limits: new Map(),
  leases: new Map(),
  endedOrder: new EndedQueue(),
  liveByRequester: new Map(),
  requesterLimits: new Map(),
  waiters: new Map(),
  defaultLeasesMax: DEFAULT_LEASES_PER_REQUESTER,
  idempotency: new Map(),
  liveCount: 0,
  anomalies: [],
  anomalyCount: 0,
});

export const idempotencyIndexKey = (requester: string, key: string): string => `${requester}\u0000${key}`;

export const leasesMaxFor = (state: LeaseState, requester: string): number =>
  state.requesterLimits.get(requester) ?? state.defaultLeasesMax;

export const liveLeasesOf = (state: LeaseState, requester: string): number =>
  state.liveByRequester.get(requester) ?? 0;

export const freeSlots = (state: LeaseState, limit: string): number => {
  const found = state.limits.get(limit);
  return found ? found.slotsMax - found.used : 0;
};

/** A lease counts against its limits until its release or revocation is folded, deadline or not. */
export const isLive = (lease: LeaseRecord | undefined): lease is LeaseRecord => lease?.status === 'live';

/** Waiters that hold their place at `nowMs`, ahead of `leaseId` (all of them when it is not queued), sharing a limit with `slots`. */
export const waitersAhead = (
  state: LeaseState,
  leaseId: string,
  slots: readonly SlotClaim[],
  nowMs: number,
  skip?: (leaseId: string) => boolean,
): number => {
  let ahead = 0;
  for (const waiter of state.waiters.values()) {
    if (waiter.leaseId === leaseId) break;
    if (waiter.expiresAtMs <= nowMs || skip?.(waiter.leaseId)) continue;
    if (waiter.slots.some((claim) => slots.some((wanted) => wanted.limit === claim.limit))) ahead += 1;
  }
  return ahead;
};

export function* liveLeases(state: LeaseState): Generator<LeaseRecord> {
  for (const lease of state.leases.values()) if (lease.status === 'live') yield lease;
}
