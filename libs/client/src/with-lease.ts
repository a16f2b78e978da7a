import { randomUUID } from 'node:crypto';
import { ERROR_CODES, LeaseError } from '@lease/events';
import {
  type AcquireRequest,
  type Lease,
  type LeaseClient,
  newHolderSecret,
  toLeaseError,
} from './client.js';
import { holdLease } from './hold.js';
import { backoffMs, localDeadlineLoss } from './renewal.js';

/** Acquire attempts when the caller does not say (retryable errors only). */
export const ACQUIRE_ATTEMPTS_DEFAULT = 5;
/** No acquire attempt starts later than this after the first, unless the caller says. */
export const ACQUIRE_RETRY_WITHIN_DEFAULT_MS = 10_000;
/** The most acquire attempts a caller may ask for. */
export const ACQUIRE_ATTEMPTS_LIMIT = 100;
/** The longest acquire retry window a caller may ask for. */
export const ACQUIRE_RETRY_WITHIN_LIMIT_MS = 10 * 60_000;
/** Release attempts on the way out (retryable errors only, and only before the local deadline). */
export const RELEASE_ATTEMPTS_MAX = 3;
/** The subset of a LeaseClient that holding a lease needs. */
export type LeaseHolderClient = Pick<LeaseClient, 'clock' | 'timeoutMs' | 'acquire' | 'renew' | 'release'>;

export interface WithLeaseOptions {
  /** Retries of the acquire on retryable errors, with the same idempotency key and secret. */
  readonly acquireRetry?: {
    /** Attempts in all, from 1 (no retry) to ACQUIRE_ATTEMPTS_LIMIT; default ACQUIRE_ATTEMPTS_DEFAULT. */
    readonly attemptsMax?: number;
    /** No attempt starts later than this after the first; default ACQUIRE_RETRY_WITHIN_DEFAULT_MS. */
    readonly withinMs?: number;
  };
  /** A renewal was confirmed; `lease` carries the new local deadline. */
  readonly onRenewal?: (lease: Lease) => void;
  /** A renewal failed with a retryable error; `attempt` counts failures since the last confirmation. */
  readonly onRenewalFailed?: (error: LeaseError, attempt: number) => void;
  /** The lease is lost; the signal is aborted with the same reason. */
  readonly onLost?: (reason: LeaseError) => void;
  /** The release on the way out did not succeed; the lease ends at its deadline instead. */
  readonly onReleaseFailed?: (error: LeaseError) => void;
}

const exitReason = (lease: Lease): LeaseError =>
  new LeaseError('LEASE_RELEASED', `lease ${lease.leaseId} is being released: its scope has ended`, {
    details: { local: true, leaseId: lease.leaseId },
  });

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Observability hooks must not break the holder: what they throw is dropped. */
const notify = <A extends unknown[]>(hook: ((...args: A) => void) | undefined, ...args: A): void => {
  try {
    hook?.(...args);
  } catch {
    // A hook's failure is the hook's business; renewal goes on.
  }
};

const checkRange = (value: number, min: number, max: number, what: string): number => {
  if (!Number.isInteger(value) || value < min || value > max)
    throw new RangeError(`${what} must be an integer from ${min} to ${max}, not ${value}`);
  return value;
};

/**
 * Acquires, retrying retryable errors within bounds. Every attempt carries the same
 * idempotency key and holder secret, so an attempt whose reply was lost is answered by
 * the next one with the same lease instead of a second grant.
 */
const acquireWithRetry = async (
  client: LeaseHolderClient,
  request: AcquireRequest,
  options: WithLeaseOptions,
): Promise<Lease> => {
  const attemptsMax = checkRange(
    options.acquireRetry?.attemptsMax ?? ACQUIRE_ATTEMPTS_DEFAULT,
    1,
    ACQUIRE_ATTEMPTS_LIMIT,
    'acquireRetry.attemptsMax',
  );
  const withinMs = checkRange(
    options.acquireRetry?.withinMs ?? ACQUIRE_RETRY_WITHIN_DEFAULT_MS,
    0,
    ACQUIRE_RETRY_WITHIN_LIMIT_MS,
    'acquireRetry.withinMs',
  );
  const attempt = {
    ...request,
    idempotencyKey: request.idempotencyKey ?? randomUUID(),
    holderSecret: request.holderSecret ?? newHolderSecret(),
  };
  const firstSentAtMonotonicMs = client.clock.monotonicMs();
  for (let n = 1; ; n++) {
    try {
      return await client.acquire(attempt, { firstSentAtMonotonicMs });
    } catch (cause) {
      const error = toLeaseError(cause);
      if (!ERROR_CODES[error.code].retryable || n >= attemptsMax) throw error;
      const delayMs = backoffMs(n);
      const elapsedMs = client.clock.monotonicMs() - firstSentAtMonotonicMs;
      if (elapsedMs + delayMs > withinMs) throw error;
      await sleep(delayMs);
    }
  }
};

/**
 * Runs `work` while holding a lease. The lease is renewed in the background (renewal.ts);
 * `signal` is aborted the moment the lease is lost, with a LeaseError as its reason: the
 * gateway's final answer to a renewal (LEASE_REVOKED, LEASE_EXPIRED, FORBIDDEN, ...), or
 * LEASE_EXPIRED with details.local when the local deadline passed without a confirmed
 * renewal. When `work` settles, the signal is aborted (LEASE_RELEASED, details.local) if it
 * was not already, a renewal in flight is awaited, and the lease is released unless it was
 * lost. Returns what `work` returns, rethrows what it throws, and leaves no timer behind.
 *
 * The signal is only as timely as the event loop: CPU-bound work that never yields delays
 * it, which is why the worker-agent enforces the deadline from outside the workload.
 */
export const withLease = async <T>(
  client: LeaseHolderClient,
  request: AcquireRequest,
  work: (signal: AbortSignal, lease: Lease) => Promise<T> | T,
  options: WithLeaseOptions = {},
): Promise<T> => {
  const { clock } = client;
  const acquired = await acquireWithRetry(client, request, options);
  // Granted too late to be of use (the acquire took longer than the TTL): no work starts.
  if (clock.monotonicMs() >= acquired.localDeadlineMonotonicMs) {
    const late = localDeadlineLoss(acquired);
    notify(options.onLost, late);
    throw late;
  }
  const controller = new AbortController();
  const held = holdLease(client, acquired, {
    onRenewed: (lease) => notify(options.onRenewal, lease),
    onRenewalFailed: (error, attempt) => notify(options.onRenewalFailed, error, attempt),
    onLost: (reason) => {
      controller.abort(reason);
      notify(options.onLost, reason);
    },
  });

  const releaseOnExit = async (lease: Lease) => {
    for (let n = 1; ; n++) {
      try {
        await client.release(lease);
        return;
      } catch (cause) {
        const error = toLeaseError(cause);
        const delayMs = backoffMs(n);
        const retry =
          ERROR_CODES[error.code].retryable &&
          n < RELEASE_ATTEMPTS_MAX &&
          clock.monotonicMs() + delayMs < lease.localDeadlineMonotonicMs;
        if (!retry) return notify(options.onReleaseFailed, error);
        await sleep(delayMs);
      }
    }
  };

  try {
    return await work(controller.signal, acquired);
  } finally {
    // Whatever `work` left running learns first that the lease is going away.
    if (!held.lost()) controller.abort(exitReason(held.current()));
    // A renewal in flight may still end the lease (a final answer): stop waits for its word.
    const still = await held.stop();
    if (still) await releaseOnExit(still);
  }
};
