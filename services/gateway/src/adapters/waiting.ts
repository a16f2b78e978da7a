import type { Projection } from '@lease/bus';
import {
  type AcquireLease,
  type AcquireOutcome,
  freeSlots,
  LeaseError,
  type StoredEvent,
  waitersAhead,
} from '@lease/events';
import type { Logger } from 'pino';
import type { Admission } from './admission.js';

/** While requests wait, the queue is looked at this often even without an event (an expired head elsewhere). */
export const WAIT_POLL_MS = 250;

interface LocalWaiter {
  readonly command: (nowMs: number) => AcquireLease;
  readonly secretHash: string;
  readonly resolve: (outcome: AcquireOutcome) => void;
  readonly timer: NodeJS.Timeout;
}

/**
 * The acquires this replica holds while they wait in the log's queue. The queue's order
 * is the log's (ADR 0007): this replica only decides, whenever slots may have freed, to
 * try the ones of its waiters that are at the head of every queue they are in.
 */
export class Waiting {
  private readonly local = new Map<string, LocalWaiter>();
  private serving = false;
  private again = false;
  private readonly poll: NodeJS.Timeout;

  constructor(
    private readonly projection: Projection,
    private readonly admission: Admission,
    private readonly nowMs: () => number,
    private readonly logger: Logger,
  ) {
    this.poll = setInterval(() => this.kick(), WAIT_POLL_MS);
    this.poll.unref();
  }

  /** Holds a queued acquire until it is granted, refused, cancelled, or its wait ends. */
  hold(
    leaseId: string,
    command: (nowMs: number) => AcquireLease,
    expiresAtMs: number,
  ): Promise<AcquireOutcome> {
    const secretHash = command(0).secretHash;
    return new Promise((resolve) => {
      const timer = setTimeout(() => this.timeOut(leaseId), Math.max(0, expiresAtMs - this.nowMs()));
      this.local
        .get(leaseId)
        ?.resolve({ ok: false, error: new LeaseError('WAIT_CANCELLED', 'replaced by a retry') });
      this.local.set(leaseId, { command, secretHash, resolve, timer });
      this.kick();
    });
  }

  /** Called for every event the projection folds. */
  onEvent({ event }: StoredEvent): void {
    if (this.local.size === 0) return;
    if (event.type === 'WaitEnded' && event.reason === 'cancelled' && this.local.has(event.leaseId)) {
      this.finish(event.leaseId, {
        ok: false,
        error: new LeaseError('WAIT_CANCELLED', `the wait for ${event.leaseId} was cancelled`, {
          details: { leaseId: event.leaseId },
        }),
      });
    }
    if (event.type !== 'LeaseRenewed') this.kick();
  }

  stop(): void {
    clearInterval(this.poll);
    for (const leaseId of [...this.local.keys()]) {
      this.finish(leaseId, {
        ok: false,
        error: new LeaseError('UNAVAILABLE', 'the gateway is stopping; retry'),
      });
    }
  }

  private kick(): void {
    if (this.local.size === 0) return;
    if (this.serving) {
      this.again = true;
      return;
    }
    void this.serve();
  }

  private async serve(): Promise<void> {
    this.serving = true;
    try {
      do {
        this.again = false;
        const state = this.projection.state;
        const now = this.nowMs();
        const ready = [...this.local.keys()].filter((leaseId) => {
          const waiter = state.waiters.get(leaseId);
          if (!waiter) return false;
          const fits = waiter.slots.every((claim) => freeSlots(state, claim.limit) >= claim.count);
          return fits && waitersAhead(state, leaseId, waiter.slots, now) === 0;
        });
        await Promise.all(ready.map((leaseId) => this.tryGrant(leaseId)));
      } while (this.again && this.local.size > 0);
    } catch (error) {
      this.logger.error({ err: error }, 'serving waiters failed');
    } finally {
      this.serving = false;
    }
  }

  private async tryGrant(leaseId: string): Promise<void> {
    const waiter = this.local.get(leaseId);
    if (!waiter) return;
    const outcome = await this.admission.acquire(waiter.command);
    if (outcome.ok && 'queued' in outcome) return; // still waiting its turn
    this.finish(leaseId, outcome);
    if (!outcome.ok) void this.endWait(leaseId, waiter.secretHash, 'refused');
  }

  private timeOut(leaseId: string): void {
    const waiter = this.local.get(leaseId);
    if (!waiter) return;
    this.finish(leaseId, {
      ok: false,
      error: new LeaseError('WAIT_TIMEOUT', `no slots came free for ${leaseId} within its wait`, {
        details: { leaseId },
      }),
    });
    // Best effort: a waiter past its expiry holds no place anyway.
    void this.endWait(leaseId, waiter.secretHash, 'timed-out');
  }

  private async endWait(leaseId: string, secretHash: string, reason: 'timed-out' | 'refused'): Promise<void> {
    const outcome = await this.admission.admin((nowMs) => ({
      type: 'EndWait',
      leaseId,
      secretHash,
      reason,
      nowMs,
    }));
    if (!outcome.ok && outcome.error.code !== 'UNKNOWN_LEASE') {
      this.logger.warn({ leaseId, code: outcome.error.code }, 'could not end a wait in the log');
    }
  }

  private finish(leaseId: string, outcome: AcquireOutcome): void {
    const waiter = this.local.get(leaseId);
    if (!waiter) return;
    this.local.delete(leaseId);
    clearTimeout(waiter.timer);
    waiter.resolve(outcome);
  }
}
