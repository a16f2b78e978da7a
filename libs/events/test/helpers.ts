import { expect } from 'vitest';
import {
  type AcquireLease,
  type Decision,
  type DefineLimit,
  evolve,
  initialState,
  type LeaseErrorCode,
  type LeaseEvent,
  type LeaseState,
  type ReleaseLease,
  type RenewLease,
  type RevokeLease,
} from '../src/index.js';

export const T0 = 1_700_000_000_000;
export const SECRET = 'a'.repeat(64);
export const OTHER_SECRET = 'b'.repeat(64);

/** Folds events as if they were appended in order, one message each, from sequence 1. */
export const given = (...events: LeaseEvent[]): LeaseState => {
  const state = initialState();
  for (const [index, event] of events.entries()) evolve(state, { seq: index + 1, event });
  return state;
};

/** Applies a decision's events to the state, as the next messages of the log. */
export const commit = (state: LeaseState, decision: Decision): LeaseState => {
  expect(decision.ok, decision.ok ? '' : `refused: ${decision.error.code} ${decision.error.message}`).toBe(
    true,
  );
  if (decision.ok) for (const event of decision.events) evolve(state, { seq: state.lastSeq + 1, event });
  return state;
};

export const expectLeaseError = (
  decision: Decision | { ok: false; error: { code: string } } | { ok: true },
  code: LeaseErrorCode,
) => {
  expect(decision.ok).toBe(false);
  if (!decision.ok) expect(decision.error.code).toBe(code);
};

export const defineLimit = (limit: string, slotsMax: number, nowMs = T0): DefineLimit => ({
  type: 'DefineLimit',
  limit,
  slotsMax,
  nowMs,
});

export const acquire = (overrides: Partial<AcquireLease> = {}): AcquireLease => ({
  type: 'AcquireLease',
  leaseId: 'lease-1',
  leaseIdChosen: false,
  requester: 'req-1',
  slots: [{ limit: 'gpu', count: 1 }],
  ttlMs: 30_000,
  secretHash: SECRET,
  nowMs: T0,
  ...overrides,
});

export const renew = (overrides: Partial<RenewLease> = {}): RenewLease => ({
  type: 'RenewLease',
  leaseId: 'lease-1',
  secretHash: SECRET,
  nowMs: T0 + 10_000,
  ...overrides,
});

export const release = (overrides: Partial<ReleaseLease> = {}): ReleaseLease => ({
  type: 'ReleaseLease',
  leaseId: 'lease-1',
  secretHash: SECRET,
  nowMs: T0 + 10_000,
  ...overrides,
});

export const revoke = (overrides: Partial<RevokeLease> = {}): RevokeLease => ({
  type: 'RevokeLease',
  leaseId: 'lease-1',
  reason: 'expired',
  graceMs: 1_000,
  nowMs: T0 + 60_000,
  ...overrides,
});

export const limitDefined = (limit: string, slotsMax: number): LeaseEvent => ({
  type: 'LimitDefined',
  v: 1,
  atMs: T0,
  limit,
  slotsMax,
});
