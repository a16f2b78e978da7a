import { LeaseError, type LeaseView } from '@lease/events';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { holdLease } from '../src/hold.js';
import type { Lease, LeaseClient } from '../src/index.js';

/** A lease handle as the SDK builds one, on a clock that fake timers move. */
const leaseAt = (sentAtMonotonicMs: number, ttlMs: number): Lease => ({
  leaseId: 'lease-1',
  fencingToken: 7,
  deadlineMs: sentAtMonotonicMs + ttlMs,
  holderSecret: 's'.repeat(32),
  view: { leaseId: 'lease-1', ttlMs } as LeaseView,
  sentAtMonotonicMs,
  ttlMs,
  localDeadlineMonotonicMs: sentAtMonotonicMs + ttlMs,
  replayed: false,
});

type Answer = 'ok' | LeaseError;

/** A client whose renewals answer from a script (then 'ok'), after `latencyMs`. */
const scriptedClient = (answers: Answer[], latencyMs = 10) => {
  const asked: { ttlMs: number | undefined; atMs: number }[] = [];
  const clock = { nowMs: () => Date.now(), monotonicMs: () => Date.now() };
  const client: Pick<LeaseClient, 'clock' | 'timeoutMs' | 'renew'> = {
    clock,
    timeoutMs: 5_000,
    renew: async (lease, options) => {
      const sentAt = clock.monotonicMs();
      asked.push({ ttlMs: options?.ttlMs, atMs: sentAt });
      await new Promise((resolve) => setTimeout(resolve, latencyMs));
      const answer = answers.shift() ?? 'ok';
      if (answer !== 'ok') throw answer;
      return leaseAt(sentAt, options?.ttlMs ?? lease.ttlMs);
    },
  };
  return { client, asked };
};

beforeEach(() => {
  vi.useFakeTimers({ now: 1_000_000 });
});
afterEach(() => {
  vi.useRealTimers();
});

describe('holding a workload lease', () => {
  it('renews a third into the initial TTL, then asks for the renewal TTL every time (slow start)', async () => {
    const { client, asked } = scriptedClient([]);
    const deadlines: number[] = [];
    const held = holdLease(client, leaseAt(Date.now(), 9_000), {
      renewTtlMs: 3_000,
      onRenewed: (lease) => deadlines.push(lease.localDeadlineMonotonicMs),
    });
    await vi.advanceTimersByTimeAsync(2_999);
    expect(asked).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(asked).toEqual([{ ttlMs: 3_000, atMs: 1_003_000 }]);
    await vi.advanceTimersByTimeAsync(10);
    expect(deadlines).toEqual([1_006_000]);
    // From then on every third of the renewal TTL.
    await vi.advanceTimersByTimeAsync(1_000);
    expect(asked.map((a) => a.atMs)).toEqual([1_003_000, 1_004_000]);
    expect(held.lost()).toBeUndefined();
    expect(await held.stop()).toMatchObject({ localDeadlineMonotonicMs: 1_007_000 });
  });

  it('retries retryable failures until the local deadline, and only then reports the lease lost', async () => {
    const unavailable = new LeaseError('UNAVAILABLE', 'no responders');
    const { client, asked } = scriptedClient(Array.from({ length: 100 }, () => unavailable));
    const lost: LeaseError[] = [];
    holdLease(client, leaseAt(Date.now(), 3_000), {
      renewTtlMs: 3_000,
      onLost: (reason) => lost.push(reason),
    });
    await vi.advanceTimersByTimeAsync(2_999);
    expect(lost).toEqual([]);
    expect(asked.length).toBeGreaterThan(3);
    await vi.advanceTimersByTimeAsync(1);
    expect(lost).toHaveLength(1);
    expect(lost[0]).toMatchObject({
      code: 'LEASE_EXPIRED',
      details: { local: true, lastCode: 'UNAVAILABLE' },
    });
  });

  it('reports the loss at once on a final answer, and renews no more', async () => {
    const { client, asked } = scriptedClient([new LeaseError('LEASE_REVOKED', 'revoked (admin)')]);
    const lost: string[] = [];
    holdLease(client, leaseAt(Date.now(), 3_000), {
      renewTtlMs: 3_000,
      onLost: (reason) => lost.push(reason.code),
    });
    await vi.advanceTimersByTimeAsync(1_010);
    expect(lost).toEqual(['LEASE_REVOKED']);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(asked).toHaveLength(1);
    expect(lost).toEqual(['LEASE_REVOKED']);
  });

  it('takes a loss heard from outside (the revocation event) before the next renewal, once', async () => {
    const { client, asked } = scriptedClient([]);
    const lost: string[] = [];
    const held = holdLease(client, leaseAt(Date.now(), 30_000), {
      renewTtlMs: 30_000,
      onLost: (reason) => lost.push(reason.code),
    });
    held.lose(new LeaseError('LEASE_REVOKED', 'heard the event'));
    held.lose(new LeaseError('LEASE_REVOKED', 'heard it again'));
    await vi.advanceTimersByTimeAsync(60_000);
    expect(lost).toEqual(['LEASE_REVOKED']);
    expect(asked).toEqual([]);
    expect(await held.stop()).toBeUndefined();
  });

  it('does not report a success that came after the local deadline as a renewal', async () => {
    const { client } = scriptedClient([], 4_000);
    const renewed: Lease[] = [];
    const lost: string[] = [];
    holdLease(client, leaseAt(Date.now(), 3_000), {
      renewTtlMs: 3_000,
      onRenewed: (lease) => renewed.push(lease),
      onLost: (reason) => lost.push(reason.code),
    });
    await vi.advanceTimersByTimeAsync(6_000);
    expect(renewed).toEqual([]);
    expect(lost).toEqual(['LEASE_EXPIRED']);
  });
});
