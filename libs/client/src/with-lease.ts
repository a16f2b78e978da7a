import { randomUUID } from 'node:crypto';
import { ERROR_CODES, LeaseError } from '@lease/events';
import {
  type AcquireRequest,
  type Lease,
  type LeaseClient,
  newHolderSecret,
  toLeaseError,
} from './client.js';
import { backoffMs, classifyRenewalError, nextRenewal } from './renewal.js';

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
/**
 * Node fires a timer of more than 2^31-1 ms at once; longer waits are taken in steps and
 * the deadline is checked again after each.
 */
const TIMER_DELAY_MAX_MS = 2 ** 31 - 1;

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
  const controller = new AbortController();
  let current = acquired;
  let failures = 0;
  let lastError: LeaseError | undefined;
  let lost: LeaseError | undefined;
  let closing = false;
  let renewTimer: ReturnType<typeof setTimeout> | undefined;
  let deadlineTimer: ReturnType<typeof setTimeout> | undefined;
  let inFlight: Promise<void> | undefined;

  const clearTimers = () => {
    clearTimeout(renewTimer);
    clearTimeout(deadlineTimer);
    renewTimer = undefined;
    deadlineTimer = undefined;
  };

  const lose = (reason: LeaseError) => {
    if (lost) return;
    lost = reason;
    clearTimers();
    controller.abort(reason);
    notify(options.onLost, reason);
  };

  /** The deadline is checked on the clock, not trusted to the timer: a timer may fire early or in steps. */
  const armDeadline = () => {
    clearTimeout(deadlineTimer);
    deadlineTimer = undefined;
    const leftMs = current.localDeadlineMonotonicMs - clock.monotonicMs();
    if (leftMs <= 0) return lose(localDeadlineLoss(current, lastError));
    deadlineTimer = setTimeout(armDeadline, Math.min(Math.ceil(leftMs), TIMER_DELAY_MAX_MS));
  };

  const scheduleRenewal = () => {
    if (lost || closing) return;
    const nowMs = clock.monotonicMs();
    const next = nextRenewal({
      ttlMs: current.ttlMs,
      localDeadlineMs: current.localDeadlineMonotonicMs,
      nowMs,
      attempt: failures,
    });
    // Nothing fits before the local deadline: the deadline timer ends the lease.
    if (next.kind !== 'renew') return;
    renewTimer = setTimeout(
      () => {
        renewTimer = undefined;
        const renewal = renewOnce();
        inFlight = renewal;
        void renewal.then(() => {
          if (inFlight === renewal) inFlight = undefined;
        });
      },
      Math.min(Math.max(0, Math.ceil(next.atMs - nowMs)), TIMER_DELAY_MAX_MS),
    );
  };

  /** One renewal and what follows from its outcome. Never rejects. */
  const renewOnce = async () => {
    const lease = current;
    const leftMs = lease.localDeadlineMonotonicMs - clock.monotonicMs();
    if (leftMs <= 0) return lose(localDeadlineLoss(lease, lastError));
    let renewed: Lease;
    try {
      // An answer after the local deadline is of no use: the lease is lost by then.
      renewed = await client.renew(lease, {
        timeoutMs: Math.max(1, Math.min(client.timeoutMs, Math.ceil(leftMs))),
      });
    } catch (cause) {
      if (lost) return;
      const error = toLeaseError(cause);
      if (classifyRenewalError(error) === 'lost') return lose(error);
      failures += 1;
      lastError = error;
      notify(options.onRenewalFailed, error, failures);
      return scheduleRenewal();
    }
    if (lost) return;
    // Confirmed too late (a starved event loop can run this after the deadline timer was due).
    if (clock.monotonicMs() >= lease.localDeadlineMonotonicMs)
      return lose(localDeadlineLoss(lease, lastError));
    current = renewed;
    failures = 0;
    lastError = undefined;
    notify(options.onRenewal, renewed);
    if (closing) return;
    armDeadline();
    scheduleRenewal();
  };

  const releaseOnExit = async () => {
    for (let n = 1; ; n++) {
      try {
        await client.release(current);
        return;
      } catch (cause) {
        const error = toLeaseError(cause);
        const delayMs = backoffMs(n);
        const retry =
          ERROR_CODES[error.code].retryable &&
          n < RELEASE_ATTEMPTS_MAX &&
          clock.monotonicMs() + delayMs < current.localDeadlineMonotonicMs;
        if (!retry) return notify(options.onReleaseFailed, error);
        await sleep(delayMs);
      }
    }
  };

  armDeadline();
  // Granted too late to be of use (the acquire took longer than the TTL): no work starts.
  if (lost) throw lost;
  scheduleRenewal();
  try {
    return await work(controller.signal, acquired);
  } finally {
    closing = true;
    clearTimers();
    // Whatever `work` left running learns first that the lease is going away.
    if (!lost) controller.abort(exitReason(current));
    // A renewal in flight may still end the lease (a final answer): wait for its word.
    while (inFlight) await inFlight;
    clearTimers();
    if (!lost) await releaseOnExit();
  }
};
