import { LeaseError, type LeaseErrorCode, type LeaseView } from '@lease/events';
import { type AcquireRequest, type Lease, leaseHandle, systemClock } from '../src/client.js';
import type { LeaseHolderClient } from '../src/with-lease.js';

/** What one call answers: success, a coded error, or a transport failure the SDK did not map. */
export type Outcome = 'ok' | LeaseErrorCode | Error;

export const TTL_MS = 3_000;

export const view = (overrides: Partial<LeaseView> = {}): LeaseView => ({
  leaseId: 'lease-1',
  requester: 'team-a',
  slots: [{ limit: 'gpu', count: 1 }],
  status: 'live',
  ttlMs: TTL_MS,
  grantedAtMs: 1_700_000_000_000,
  deadlineMs: 1_700_000_000_000 + TTL_MS,
  fencingToken: 7,
  renewals: 0,
  grantSeq: 7,
  lastSubjectSeq: 0,
  ...overrides,
});

export const acquireRequest: AcquireRequest = {
  requester: 'team-a',
  slots: [{ limit: 'gpu', count: 1 }],
  ttlMs: TTL_MS,
};

/**
 * An in-memory stand-in for the gateway as seen through LeaseClient (not a fake of NATS).
 * Each verb answers from its script, one outcome per call, then `ok` once the script is
 * used up (or the `then` outcome when given). The clock is the system clock, which vitest's
 * fake timers move.
 */
export class FakeLeaseClient implements LeaseHolderClient {
  readonly clock = systemClock;
  readonly timeoutMs = 1_000;
  /** Monotonic times at which each verb was called. */
  readonly calls = { acquire: [] as number[], renew: [] as number[], release: [] as number[] };
  readonly acquireRequests: AcquireRequest[] = [];
  /** Events in the order they happened, for assertions on ordering. */
  readonly log: string[] = [];
  acquireLatencyMs = 0;
  renewLatencyMs = 0;

  constructor(
    private readonly script: {
      acquire?: Outcome[];
      renew?: Outcome[];
      renewThen?: Outcome;
      release?: Outcome[];
    } = {},
  ) {}

  private next(queue: Outcome[] | undefined, then: Outcome = 'ok'): Outcome {
    return queue?.shift() ?? then;
  }

  private static fail(outcome: Exclude<Outcome, 'ok'>): never {
    if (outcome instanceof Error) throw outcome;
    throw new LeaseError(outcome, `scripted ${outcome}`);
  }

  async acquire(request: AcquireRequest): Promise<Lease> {
    const sentAtMonotonicMs = this.clock.monotonicMs();
    this.calls.acquire.push(sentAtMonotonicMs);
    this.acquireRequests.push(request);
    this.log.push('acquire');
    const outcome = this.next(this.script.acquire);
    if (this.acquireLatencyMs > 0) await new Promise((resolve) => setTimeout(resolve, this.acquireLatencyMs));
    if (outcome !== 'ok') FakeLeaseClient.fail(outcome);
    return leaseHandle({
      view: view(),
      holderSecret: request.holderSecret ?? 'a-secret-of-sixteen-chars',
      sentAtMonotonicMs,
      ttlMs: request.ttlMs,
    });
  }

  async renew(lease: Lease): Promise<Lease> {
    const sentAtMonotonicMs = this.clock.monotonicMs();
    this.calls.renew.push(sentAtMonotonicMs);
    this.log.push('renew sent');
    const outcome = this.next(this.script.renew, this.script.renewThen);
    if (this.renewLatencyMs > 0) await new Promise((resolve) => setTimeout(resolve, this.renewLatencyMs));
    this.log.push(`renew answered ${outcome instanceof Error ? 'transport error' : outcome}`);
    if (outcome !== 'ok') FakeLeaseClient.fail(outcome);
    return leaseHandle({
      view: view({ renewals: lease.view.renewals + 1 }),
      holderSecret: lease.holderSecret,
      sentAtMonotonicMs,
      ttlMs: lease.ttlMs,
    });
  }

  async release(lease: Pick<Lease, 'leaseId' | 'holderSecret'>): Promise<LeaseView> {
    this.calls.release.push(this.clock.monotonicMs());
    this.log.push(`release ${lease.leaseId}`);
    const outcome = this.next(this.script.release);
    if (outcome !== 'ok') FakeLeaseClient.fail(outcome);
    return view({ status: 'released' });
  }
}
