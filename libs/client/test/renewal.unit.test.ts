import { ERROR_CODES, LeaseError, type LeaseErrorCode } from '@lease/events';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  backoffMs,
  classifyRenewalError,
  nextRenewal,
  RETRY_DELAY_MAX_MS,
  RETRY_FIRST_DELAY_MS,
  RETRY_FLOOR_MS,
} from '../src/renewal.js';

/** A lease confirmed by a send at `sentAtMs` with `ttlMs`: its local deadline is their sum. */
const confirmed = (sentAtMs: number, ttlMs: number) => ({ ttlMs, localDeadlineMs: sentAtMs + ttlMs });

describe('the first renewal after a confirmed send', () => {
  it('is due a third of the TTL after the send', () => {
    expect(nextRenewal({ ...confirmed(0, 3_000), nowMs: 0, attempt: 0 })).toEqual({
      kind: 'renew',
      atMs: 1_000,
    });
    expect(nextRenewal({ ...confirmed(500, 30_000), nowMs: 700, attempt: 0 })).toEqual({
      kind: 'renew',
      atMs: 10_500,
    });
  });

  it('is due at once when the send is already more than a third of the TTL ago', () => {
    expect(nextRenewal({ ...confirmed(0, 3_000), nowMs: 1_800, attempt: 0 })).toEqual({
      kind: 'renew',
      atMs: 1_800,
    });
  });

  it('is not scheduled once the local deadline has passed', () => {
    expect(nextRenewal({ ...confirmed(0, 3_000), nowMs: 3_000, attempt: 0 })).toEqual({
      kind: 'wait-for-deadline',
    });
  });
});

describe('retries after a failed renewal', () => {
  it('back off from 100 ms, doubling, to at most 5 s while the deadline is far', () => {
    const lease = confirmed(0, 24 * 60 * 60 * 1_000);
    const delays = [1, 2, 3, 4, 5, 6, 7, 8, 50].map((attempt) => {
      const next = nextRenewal({ ...lease, nowMs: 1_000, attempt });
      return next.kind === 'renew' ? next.atMs - 1_000 : undefined;
    });
    expect(delays).toEqual([100, 200, 400, 800, 1_600, 3_200, 5_000, 5_000, 5_000]);
    expect(backoffMs(1)).toBe(RETRY_FIRST_DELAY_MS);
    expect(backoffMs(1_000_000)).toBe(RETRY_DELAY_MAX_MS);
  });

  it('never wait more than half of the time left to the local deadline', () => {
    const lease = confirmed(0, 30_000);
    expect(nextRenewal({ ...lease, nowMs: 26_000, attempt: 10 })).toEqual({ kind: 'renew', atMs: 28_000 });
    expect(nextRenewal({ ...lease, nowMs: 29_000, attempt: 10 })).toEqual({ kind: 'renew', atMs: 29_500 });
  });

  it('wait at least the 50 ms floor', () => {
    expect(nextRenewal({ ...confirmed(0, 3_000), nowMs: 2_910, attempt: 1 })).toEqual({
      kind: 'renew',
      atMs: 2_910 + RETRY_FLOOR_MS,
    });
  });

  it('stop when not even the floor fits before the local deadline', () => {
    const lease = confirmed(0, 3_000);
    expect(nextRenewal({ ...lease, nowMs: 3_000 - RETRY_FLOOR_MS, attempt: 3 })).toEqual({
      kind: 'wait-for-deadline',
    });
    expect(nextRenewal({ ...lease, nowMs: 3_500, attempt: 3 })).toEqual({ kind: 'wait-for-deadline' });
  });

  it('shrink as the deadline nears when every retry fails at once', () => {
    const lease = confirmed(0, 3_000);
    let nowMs = 1_000;
    const delays: number[] = [];
    for (let attempt = 1; ; attempt++) {
      const next = nextRenewal({ ...lease, nowMs, attempt });
      if (next.kind !== 'renew') break;
      delays.push(next.atMs - nowMs);
      nowMs = next.atMs;
    }
    // 100, 200, 400 while the backoff is the smaller; then half of what is left, down to the floor.
    expect(delays).toEqual([100, 200, 400, 650, 325, 162, 81, 50]);
    expect(nowMs).toBeLessThan(3_000);
  });

  it('land strictly before the local deadline, at least a floor apart, and end, for any TTL and failure time', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1_000, max: 24 * 60 * 60 * 1_000 }),
        fc.double({ min: 0, max: 1, noNaN: true }),
        (ttlMs, failedAt) => {
          const lease = confirmed(0, ttlMs);
          let nowMs = Math.floor(failedAt * ttlMs);
          let retries = 0;
          for (let attempt = 1; ; attempt++) {
            const next = nextRenewal({ ...lease, nowMs, attempt });
            if (next.kind !== 'renew') return true;
            if (next.atMs >= lease.localDeadlineMs) return false;
            if (next.atMs - nowMs < RETRY_FLOOR_MS) return false;
            nowMs = next.atMs;
            retries += 1;
            if (retries > ttlMs / RETRY_FLOOR_MS) return false;
          }
        },
      ),
      { numRuns: 50, verbose: true },
    );
  });
});

describe('classifying a failed renewal', () => {
  const finalCodes: LeaseErrorCode[] = [
    'LEASE_REVOKED',
    'LEASE_RELEASED',
    'LEASE_EXPIRED',
    'FORBIDDEN',
    'UNKNOWN_LEASE',
  ];
  const retryableCodes: LeaseErrorCode[] = [
    'NOT_READY',
    'UNAVAILABLE',
    'STALE_VIEW',
    'NO_CAPACITY',
    'REQUESTER_LIMIT_REACHED',
  ];

  it.each(finalCodes)('ends the lease on %s', (code) => {
    expect(classifyRenewalError(new LeaseError(code, 'final'))).toBe('lost');
  });

  it.each(retryableCodes)('retries on %s', (code) => {
    expect(classifyRenewalError(new LeaseError(code, 'retryable'))).toBe('retry');
  });

  it('ends the lease on every code the error table marks final, and on no other', () => {
    for (const [code, info] of Object.entries(ERROR_CODES)) {
      const expected = info.retryable ? 'retry' : 'lost';
      expect(classifyRenewalError(new LeaseError(code as LeaseErrorCode, code)), code).toBe(expected);
    }
  });

  it('retries on a transport failure that is not a LeaseError', () => {
    expect(classifyRenewalError(new Error('TIMEOUT'))).toBe('retry');
  });

  it('classes a final error from another copy of the package by its code', () => {
    expect(classifyRenewalError({ code: 'LEASE_REVOKED', retryable: false, message: 'revoked' })).toBe(
      'lost',
    );
  });
});
