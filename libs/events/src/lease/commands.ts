import type { z } from 'zod';
import type { Metadata, RevokeReason, SlotClaim } from '../schemas/common.js';

/**
 * Commands as the decider sees them: validated, with time and ids already chosen by the
 * shell (`nowMs`, `leaseId`, `secretHash`), so `decide` stays pure.
 */
export interface DefineLimit {
  readonly type: 'DefineLimit';
  readonly limit: string;
  readonly slotsMax: number;
  readonly nowMs: number;
  readonly actor?: string | undefined;
}

export interface RemoveLimit {
  readonly type: 'RemoveLimit';
  readonly limit: string;
  readonly nowMs: number;
  readonly actor?: string | undefined;
}

export interface SetRequesterLimit {
  readonly type: 'SetRequesterLimit';
  readonly requester: string;
  readonly leasesMax: number;
  readonly nowMs: number;
  readonly actor?: string | undefined;
}

export interface AcquireLease {
  readonly type: 'AcquireLease';
  readonly leaseId: string;
  /** A caller-chosen id already in use is refused; a generated one is simply drawn again. */
  readonly leaseIdChosen: boolean;
  readonly requester: string;
  readonly holder?: string | undefined;
  readonly slots: readonly SlotClaim[];
  readonly ttlMs: number;
  readonly secretHash: string;
  readonly idempotencyKey?: string | undefined;
  readonly metadata?: z.infer<typeof Metadata> | undefined;
  /** When set and later than now, an acquire that finds no free slots may wait in the queue until then. */
  readonly waitUntilMs?: number | undefined;
  /** The gateway replica that holds the request while it waits. */
  readonly owner?: string | undefined;
  readonly nowMs: number;
}

/** Ends a wait: the client cancelled it, its owner timed it out, or it can never be granted. */
export interface EndWait {
  readonly type: 'EndWait';
  readonly leaseId: string;
  readonly secretHash: string;
  readonly reason: 'cancelled' | 'timed-out' | 'refused';
  readonly nowMs: number;
}

export interface RenewLease {
  readonly type: 'RenewLease';
  readonly leaseId: string;
  readonly secretHash: string;
  readonly ttlMs?: number | undefined;
  readonly nowMs: number;
}

export interface ReleaseLease {
  readonly type: 'ReleaseLease';
  readonly leaseId: string;
  readonly secretHash: string;
  readonly detail?: string | undefined;
  readonly nowMs: number;
}

export interface RevokeLease {
  readonly type: 'RevokeLease';
  readonly leaseId: string;
  readonly reason: RevokeReason;
  /** Expiry revocations wait this long past the deadline, to absorb clock skew. */
  readonly graceMs: number;
  /** The per-lease sequence the revoker folded; when given and older than the state's, the revocation is stale. */
  readonly againstSeq?: number | undefined;
  readonly actor?: string | undefined;
  readonly detail?: string | undefined;
  readonly nowMs: number;
}

export type LeaseCommand =
  | DefineLimit
  | RemoveLimit
  | SetRequesterLimit
  | AcquireLease
  | RenewLease
  | ReleaseLease
  | RevokeLease
  | EndWait;

/** Bounds that are policy, not history: they are checked when deciding, never when folding. */
export interface Policy {
  readonly ttlMinMs: number;
  readonly ttlMaxMs: number;
  readonly metadataMaxBytes: number;
}

/** Waiters one limit may have in its queue; past it an acquire is refused at once. */
export const WAITERS_PER_LIMIT_MAX = 1_000;

export const DEFAULT_POLICY: Policy = Object.freeze({
  ttlMinMs: 1_000,
  ttlMaxMs: 24 * 60 * 60 * 1_000,
  metadataMaxBytes: 2_048,
});
