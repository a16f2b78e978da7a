import { ERROR_CODES, isLeaseError, LeaseError, RENEW_FRACTION, renewAtMs } from '@lease/events';
import type { Lease } from './client.js';

/**
 * When a holder renews, as a pure function of its monotonic clock (ADR 0003).
 *
 * After a confirmed send the next renewal is due at RENEW_FRACTION (a third) of the TTL
 * after that send. After a retryable failure the holder retries with a backoff that starts
 * short (a gateway restart answers NOT_READY for a few seconds) and doubles up to a
 * ceiling, but never waits more than half of the time left to its local deadline, so the
 * retries crowd in as the deadline nears. No retry is ever scheduled at or past the local
 * deadline: once not even the floor fits, the holder waits for the deadline and the lease
 * is lost there. The floor bounds the number of retries per renewal to ttlMs / RETRY_FLOOR_MS.
 */

/** The first retry after a failed renewal waits this long. */
export const RETRY_FIRST_DELAY_MS = 100;
/** The backoff doubles per consecutive failure up to this ceiling. */
export const RETRY_DELAY_MAX_MS = 5_000;
/** A retry never waits more than this fraction of the time left to the local deadline. */
export const RETRY_REMAINING_FRACTION = 1 / 2;
/** Nor less than this: it bounds how many retries fit before the deadline. */
export const RETRY_FLOOR_MS = 50;
/** Beyond this exponent the doubling is past any ceiling; it keeps 2 ** n finite. */
const BACKOFF_EXPONENT_MAX = 30;

export interface RenewalInput {
  /** The TTL the local deadline was measured with. */
  readonly ttlMs: number;
  /** Monotonic: the last confirmed send plus ttlMs. */
  readonly localDeadlineMs: number;
  /** Monotonic: now. */
  readonly nowMs: number;
  /** 0 right after a confirmed send; n after the nth consecutive failed renewal since then. */
  readonly attempt: number;
}

export type NextRenewal =
  /** Send the next renewal at this monotonic time (always before the local deadline). */
  | { readonly kind: 'renew'; readonly atMs: number }
  /** No renewal fits before the local deadline any more: the lease is lost when it passes. */
  | { readonly kind: 'wait-for-deadline' };

/** The backoff alone, for the nth consecutive failure (n >= 1): 100, 200, 400, ... 5000 ms. */
export const backoffMs = (attempt: number): number =>
  Math.min(
    RETRY_DELAY_MAX_MS,
    RETRY_FIRST_DELAY_MS * 2 ** Math.min(Math.max(attempt, 1) - 1, BACKOFF_EXPONENT_MAX),
  );

export const nextRenewal = ({ ttlMs, localDeadlineMs, nowMs, attempt }: RenewalInput): NextRenewal => {
  const remainingMs = localDeadlineMs - nowMs;
  if (remainingMs <= 0) return { kind: 'wait-for-deadline' };
  if (attempt <= 0) {
    const sentAtMs = localDeadlineMs - ttlMs;
    return { kind: 'renew', atMs: Math.max(nowMs, renewAtMs(sentAtMs, ttlMs, RENEW_FRACTION)) };
  }
  const delayMs = Math.max(
    RETRY_FLOOR_MS,
    Math.min(backoffMs(attempt), Math.floor(remainingMs * RETRY_REMAINING_FRACTION)),
  );
  if (delayMs >= remainingMs) return { kind: 'wait-for-deadline' };
  return { kind: 'renew', atMs: nowMs + delayMs };
};

export type RenewalFailure = 'lost' | 'retry';

/**
 * A final code (revoked, released, expired, forbidden, unknown, or any other the error
 * table marks final) ends the lease; a retryable code or anything else (a transport
 * failure the client did not map) is retried until the local deadline. Tested on the
 * code, so an error from another copy of @lease/events is classed the same.
 */
export const classifyRenewalError = (error: unknown): RenewalFailure =>
  isLeaseError(error) && !ERROR_CODES[error.code].retryable ? 'lost' : 'retry';

/** The lease is lost on the holder's own clock: the local deadline passed without a confirmed renewal. */
export const localDeadlineLoss = (lease: Lease, lastError?: LeaseError): LeaseError =>
  new LeaseError(
    'LEASE_EXPIRED',
    `lease ${lease.leaseId} passed its local deadline without a confirmed renewal` +
      (lastError ? ` (last renewal: ${lastError.code})` : ''),
    {
      details: { local: true, leaseId: lease.leaseId, ...(lastError ? { lastCode: lastError.code } : {}) },
      ...(lastError ? { cause: lastError } : {}),
    },
  );
