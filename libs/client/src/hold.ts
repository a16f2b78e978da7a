import type { LeaseError } from '@lease/events';
import { type Lease, type LeaseClient, toLeaseError } from './client.js';
import { classifyRenewalError, localDeadlineLoss, nextRenewal } from './renewal.js';

/**
 * Holding a granted lease (ADR 0006): renewals a third of the TTL after each confirmed
 * send, retries on a shrinking schedule, the loss reported once, the moment it is known
 * (a final answer, or the local deadline passing). `withLease` is built on it; the
 * worker-agent uses it directly, because renewals may ask for their own TTL
 * (`renewTtlMs`: a slow start's grant carries a longer one) and the lease may be ended from
 * outside (`lose`: the agent heard the revocation event).
 */

const TIMER_DELAY_MAX_MS = 2 ** 31 - 1;

export type HoldingClient = Pick<LeaseClient, 'clock' | 'timeoutMs' | 'renew'>;

export interface HoldOptions {
  /** The TTL every renewal asks for; the lease's own when absent. */
  readonly renewTtlMs?: number | undefined;
  readonly onRenewed?: (lease: Lease) => void;
  readonly onRenewalFailed?: (error: LeaseError, attempt: number) => void;
  readonly onLost?: (reason: LeaseError) => void;
}

export interface HeldLease {
  /** The last confirmed lease (its local deadline is the one in force). */
  current(): Lease;
  /** Why the lease was lost, once it is. */
  lost(): LeaseError | undefined;
  /** Ends the lease from outside (a revocation event): stops renewing and reports the loss. */
  lose(reason: LeaseError): void;
  /** Stops renewing, waits for a renewal in flight, and answers the lease if it is still held. */
  stop(): Promise<Lease | undefined>;
}

const notify = <A extends unknown[]>(hook: ((...args: A) => void) | undefined, ...args: A) => {
  try {
    hook?.(...args);
  } catch {
    // A hook's failure is the hook's business; renewal goes on.
  }
};

export const holdLease = (client: HoldingClient, granted: Lease, options: HoldOptions): HeldLease => {
  const { clock } = client;
  let current = granted;
  let failures = 0;
  let lastError: LeaseError | undefined;
  let lostReason: LeaseError | undefined;
  /** stop() was called: no new renewal starts, one in flight still counts. */
  let closing = false;
  let stopped = false;
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
    if (lostReason || stopped) return;
    lostReason = reason;
    clearTimers();
    notify(options.onLost, reason);
  };

  const armDeadline = () => {
    clearTimeout(deadlineTimer);
    deadlineTimer = undefined;
    const leftMs = current.localDeadlineMonotonicMs - clock.monotonicMs();
    if (leftMs <= 0) return lose(localDeadlineLoss(current, lastError));
    deadlineTimer = setTimeout(armDeadline, Math.min(Math.ceil(leftMs), TIMER_DELAY_MAX_MS));
  };

  const scheduleRenewal = () => {
    if (lostReason || closing) return;
    const nowMs = clock.monotonicMs();
    const next = nextRenewal({
      ttlMs: current.ttlMs,
      localDeadlineMs: current.localDeadlineMonotonicMs,
      nowMs,
      attempt: failures,
    });
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

  const renewOnce = async () => {
    const lease = current;
    const leftMs = lease.localDeadlineMonotonicMs - clock.monotonicMs();
    if (leftMs <= 0) return lose(localDeadlineLoss(lease, lastError));
    let renewed: Lease;
    try {
      renewed = await client.renew(lease, {
        ...(options.renewTtlMs === undefined ? {} : { ttlMs: options.renewTtlMs }),
        timeoutMs: Math.max(1, Math.min(client.timeoutMs, Math.ceil(leftMs))),
      });
    } catch (cause) {
      if (lostReason || stopped) return;
      const error = toLeaseError(cause);
      if (classifyRenewalError(error) === 'lost') return lose(error);
      failures += 1;
      lastError = error;
      notify(options.onRenewalFailed, error, failures);
      return scheduleRenewal();
    }
    if (lostReason || stopped) return;
    if (clock.monotonicMs() >= lease.localDeadlineMonotonicMs)
      return lose(localDeadlineLoss(lease, lastError));
    current = renewed;
    failures = 0;
    lastError = undefined;
    notify(options.onRenewed, renewed);
    if (closing) return;
    armDeadline();
    scheduleRenewal();
  };

  armDeadline();
  scheduleRenewal();

  return {
    current: () => current,
    lost: () => lostReason,
    lose,
    async stop() {
      closing = true;
      clearTimeout(renewTimer);
      renewTimer = undefined;
      // A renewal in flight may still end the lease (a final answer): wait for its word.
      while (inFlight) await inFlight;
      stopped = true;
      clearTimers();
      if (lostReason) return undefined;
      if (clock.monotonicMs() >= current.localDeadlineMonotonicMs) {
        lostReason = localDeadlineLoss(current, lastError);
        return undefined;
      }
      return current;
    },
  };
};
