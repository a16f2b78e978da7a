import type { LeaseView, LimitView } from '../schemas/replies.v1.js';
import type { LeaseRecord, LeaseState } from './state.js';

/** What a client may see of a lease: everything but the secret's hash. */
export const leaseView = (lease: LeaseRecord): LeaseView => ({
  leaseId: lease.leaseId,
  requester: lease.requester,
  ...(lease.holder !== undefined ? { holder: lease.holder } : {}),
  slots: lease.slots.map((claim) => ({ ...claim })),
  status: lease.status,
  ttlMs: lease.ttlMs,
  grantedAtMs: lease.grantedAtMs,
  deadlineMs: lease.deadlineMs,
  fencingToken: lease.fencingToken,
  renewals: lease.renewals,
  grantSeq: lease.grantSeq,
  lastSubjectSeq: lease.lastSubjectSeq,
  ...(lease.endedAtMs !== undefined ? { endedAtMs: lease.endedAtMs } : {}),
  ...(lease.revokeReason !== undefined ? { revokeReason: lease.revokeReason } : {}),
  ...(lease.metadata !== undefined ? { metadata: lease.metadata } : {}),
});

export const limitView = (state: LeaseState, name: string): LimitView | null => {
  const limit = state.limits.get(name);
  return limit
    ? { limit: name, slotsMax: limit.slotsMax, used: limit.used, free: limit.slotsMax - limit.used }
    : null;
};

export const limitViews = (state: LeaseState): LimitView[] =>
  [...state.limits.keys()].sort().map((name) => limitView(state, name)!);

export interface LeaseFilter {
  readonly requester?: string | undefined;
  readonly limit?: string | undefined;
  readonly holder?: string | undefined;
  readonly includeEnded?: boolean | undefined;
}

export const matchesFilter = (lease: LeaseRecord, filter: LeaseFilter): boolean =>
  (filter.includeEnded === true || lease.status === 'live') &&
  (filter.requester === undefined || lease.requester === filter.requester) &&
  (filter.holder === undefined || lease.holder === filter.holder) &&
  (filter.limit === undefined || lease.slots.some((claim) => claim.limit === filter.limit));
