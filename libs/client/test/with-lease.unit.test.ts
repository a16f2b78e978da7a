import type { LeaseError } from '@lease/events';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { Lease } from '../src/client.js';
import { RELEASE_ATTEMPTS_MAX, withLease } from '../src/with-lease.js';
import { acquireRequest, FakeLeaseClient } from './fake-client.js';

let t0 = 0;
/** Fake milliseconds since the test began. */
const elapsed = () => performance.now() - t0;
const relative = (times: number[]) => times.map((time) => time - t0);

beforeEach(() => {
  vi.useFakeTimers();
  t0 = performance.now();
});

afterEach(() => {
  vi.useRealTimers();
});

const untilAborted = (signal: AbortSignal) =>
  new Promise<LeaseError>((resolve) => {
    if (signal.aborted) resolve(signal.reason as LeaseError);
    else signal.addEventListener('abort', () => resolve(signal.reason as LeaseError), { once: true });
  });

/** Work that waits for the signal and says when and why it was aborted. */
const waitForLoss = async (signal: AbortSignal) => {
  const reason = await untilAborted(signal);
  return { reason, atMs: elapsed() };
};

/** Work that holds the lease until the test lets it finish. */
const heldWork = () => {
  let finish: (value: string) => void = () => undefined;
  let fail: (error: Error) => void = () => undefined;
  const done = new Promise<string>((resolve, reject) => {
    finish = resolve;
    fail = reject;
  });
  const seen: { signal?: AbortSignal; lease?: Lease } = {};
  const work = (signal: AbortSignal, lease: Lease) => {
    seen.signal = signal;
    seen.lease = lease;
    return done;
  };
  return { work, seen, finish: (value: string) => finish(value), fail: (error: Error) => fail(error) };
};

describe('withLease renewals', () => {
  it('renews a third of the TTL after each confirmed send', async () => {
    const client = new FakeLeaseClient();
    const held = heldWork();
    const running = withLease(client, acquireRequest, held.work);
    await vi.advanceTimersByTimeAsync(3_500);
    expect(relative(client.calls.renew)).toEqual([1_000, 2_000, 3_000]);
    held.finish('done');
    await running;
  });

  it('aborts the signal with the gateway LEASE_REVOKED the moment a renewal is answered revoked', async () => {
    const client = new FakeLeaseClient({ renew: ['LEASE_REVOKED'] });
    const onLost = vi.fn();
    const running = withLease(client, acquireRequest, waitForLoss, { onLost });
    await vi.advanceTimersByTimeAsync(1_000);
    const { reason, atMs } = await running;
    expect(reason).toMatchObject({ code: 'LEASE_REVOKED', retryable: false });
    expect(atMs).toBe(1_000);
    expect(onLost).toHaveBeenCalledExactlyOnceWith(reason);
    expect(client.calls.renew).toHaveLength(1);
  });

  it('aborts the signal with a local LEASE_EXPIRED at the local deadline while every renewal answers NOT_READY', async () => {
    const client = new FakeLeaseClient({ renewThen: 'NOT_READY' });
    const failures: number[] = [];
    const held = heldWork();
    const running = withLease(client, acquireRequest, held.work, {
      onRenewalFailed: (error, attempt) => {
        expect(error.code).toBe('NOT_READY');
        failures.push(attempt);
      },
    });
    await vi.advanceTimersByTimeAsync(2_999);
    expect(held.seen.signal?.aborted).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(held.seen.signal?.aborted).toBe(true);
    expect(held.seen.signal?.reason).toMatchObject({
      code: 'LEASE_EXPIRED',
      details: { local: true, lastCode: 'NOT_READY' },
    });
    // Retried, on the shrinking schedule, and never at or after the deadline.
    expect(relative(client.calls.renew)).toEqual([
      1_000, 1_100, 1_300, 1_700, 2_350, 2_675, 2_837, 2_918, 2_968,
    ]);
    expect(failures).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9]);
    held.finish('done');
    await running;
  });

  it('keeps the lease when a NOT_READY is followed by a successful renewal before the local deadline', async () => {
    const client = new FakeLeaseClient({ renew: ['NOT_READY', 'ok'] });
    const onRenewal = vi.fn();
    const held = heldWork();
    const running = withLease(client, acquireRequest, held.work, { onRenewal });
    await vi.advanceTimersByTimeAsync(10_000);
    expect(held.seen.signal?.aborted).toBe(false);
    expect(onRenewal).toHaveBeenCalled();
    held.finish('done');
    await expect(running).resolves.toBe('done');
  });

  it('measures the new local deadline from the send of the renewal that was confirmed', async () => {
    const client = new FakeLeaseClient({ renew: ['NOT_READY', 'ok'], renewThen: 'NOT_READY' });
    const onRenewal = vi.fn();
    const held = heldWork();
    const running = withLease(client, acquireRequest, held.work, { onRenewal });
    // Confirmed at 1100 (the retry after the NOT_READY at 1000): the deadline moves to 4100.
    await vi.advanceTimersByTimeAsync(4_099);
    expect(onRenewal).toHaveBeenCalledOnce();
    const [renewed] = onRenewal.mock.lastCall as [Lease];
    expect(renewed.localDeadlineMonotonicMs - t0).toBe(4_100);
    expect(held.seen.signal?.aborted).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(held.seen.signal?.reason).toMatchObject({ code: 'LEASE_EXPIRED', details: { local: true } });
    held.finish('done');
    await running;
  });

  it('retries a renewal that failed in transport, without losing the lease', async () => {
    const client = new FakeLeaseClient({ renew: [new Error('TIMEOUT'), 'ok'] });
    const held = heldWork();
    const running = withLease(client, acquireRequest, held.work);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(relative(client.calls.renew).slice(0, 3)).toEqual([1_000, 1_100, 2_100]);
    expect(held.seen.signal?.aborted).toBe(false);
    held.finish('done');
    await running;
  });

  it('keeps renewing when an observability hook throws', async () => {
    const client = new FakeLeaseClient();
    const held = heldWork();
    const running = withLease(client, acquireRequest, held.work, {
      onRenewal: () => {
        throw new Error('a broken hook');
      },
    });
    await vi.advanceTimersByTimeAsync(3_500);
    expect(client.calls.renew).toHaveLength(3);
    expect(held.seen.signal?.aborted).toBe(false);
    held.finish('done');
    await running;
  });
});

describe('withLease on the way out', () => {
  it('releases the lease when the work returns, and returns its value', async () => {
    const client = new FakeLeaseClient();
    const value = await withLease(client, acquireRequest, async () => 42);
    expect(value).toBe(42);
    expect(client.log).toEqual(['acquire', 'release lease-1']);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('releases the lease when the work throws, and rethrows its error', async () => {
    const client = new FakeLeaseClient();
    const thrown = new Error('the work failed');
    await expect(
      withLease(client, acquireRequest, async () => {
        throw thrown;
      }),
    ).rejects.toBe(thrown);
    expect(client.calls.release).toHaveLength(1);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('does not release a lease that was lost, even when the work then returns normally', async () => {
    const client = new FakeLeaseClient({ renew: ['FORBIDDEN'] });
    const running = withLease(client, acquireRequest, waitForLoss);
    await vi.advanceTimersByTimeAsync(1_000);
    const { reason } = await running;
    expect(reason.code).toBe('FORBIDDEN');
    expect(client.calls.release).toEqual([]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('does not release a lease lost to its local deadline', async () => {
    const client = new FakeLeaseClient({ renewThen: 'UNAVAILABLE' });
    const running = withLease(client, acquireRequest, waitForLoss);
    await vi.advanceTimersByTimeAsync(3_000);
    const { reason } = await running;
    expect(reason).toMatchObject({ code: 'LEASE_EXPIRED', details: { local: true } });
    expect(client.calls.release).toEqual([]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('aborts the signal with a local LEASE_RELEASED before the release is sent', async () => {
    const client = new FakeLeaseClient();
    let kept: AbortSignal | undefined;
    await withLease(client, acquireRequest, async (signal) => {
      kept = signal;
      signal.addEventListener('abort', () => client.log.push('aborted'));
    });
    expect(kept?.reason).toMatchObject({ code: 'LEASE_RELEASED', details: { local: true } });
    expect(client.log).toEqual(['acquire', 'aborted', 'release lease-1']);
  });

  it('leaves no timer running when the work returns between a failed renewal and its retry', async () => {
    const client = new FakeLeaseClient({ renew: ['NOT_READY'] });
    const held = heldWork();
    const running = withLease(client, acquireRequest, held.work);
    await vi.advanceTimersByTimeAsync(1_050);
    expect(vi.getTimerCount()).toBeGreaterThan(0);
    held.finish('done');
    await expect(running).resolves.toBe('done');
    expect(vi.getTimerCount()).toBe(0);
    expect(client.calls.renew).toHaveLength(1);
    expect(client.calls.release).toHaveLength(1);
  });

  it('waits for a renewal in flight to be answered before releasing', async () => {
    const client = new FakeLeaseClient();
    client.renewLatencyMs = 200;
    const held = heldWork();
    let returned = false;
    const running = withLease(client, acquireRequest, held.work).then((value) => {
      returned = true;
      return value;
    });
    await vi.advanceTimersByTimeAsync(1_100);
    held.finish('done');
    await vi.advanceTimersByTimeAsync(99);
    expect(returned).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    await expect(running).resolves.toBe('done');
    expect(client.log).toEqual(['acquire', 'renew sent', 'renew answered ok', 'release lease-1']);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('does not release when a renewal in flight at the exit is answered revoked', async () => {
    const client = new FakeLeaseClient({ renew: ['LEASE_REVOKED'] });
    client.renewLatencyMs = 200;
    const onLost = vi.fn();
    const held = heldWork();
    const running = withLease(client, acquireRequest, held.work, { onLost });
    await vi.advanceTimersByTimeAsync(1_100);
    held.finish('done');
    await vi.advanceTimersByTimeAsync(100);
    await expect(running).resolves.toBe('done');
    expect(onLost).toHaveBeenCalledOnce();
    expect(client.calls.release).toEqual([]);
  });

  it(`retries a release answered UNAVAILABLE at most ${RELEASE_ATTEMPTS_MAX} times, then reports it and still returns`, async () => {
    const client = new FakeLeaseClient({ release: Array(10).fill('UNAVAILABLE') });
    const onReleaseFailed = vi.fn();
    const running = withLease(client, acquireRequest, async () => 'done', { onReleaseFailed });
    await vi.advanceTimersByTimeAsync(1_000);
    await expect(running).resolves.toBe('done');
    expect(client.calls.release).toHaveLength(RELEASE_ATTEMPTS_MAX);
    expect(onReleaseFailed).toHaveBeenCalledExactlyOnceWith(expect.objectContaining({ code: 'UNAVAILABLE' }));
    expect(vi.getTimerCount()).toBe(0);
  });
});

describe('withLease acquiring', () => {
  it('retries an acquire answered with a retryable error, with the same idempotency key and holder secret', async () => {
    const client = new FakeLeaseClient({ acquire: ['NOT_READY', 'UNAVAILABLE'] });
    const running = withLease(client, acquireRequest, async (_signal, lease) => lease.leaseId);
    await vi.advanceTimersByTimeAsync(300);
    await expect(running).resolves.toBe('lease-1');
    expect(relative(client.calls.acquire)).toEqual([0, 100, 300]);
    const [first, ...rest] = client.acquireRequests;
    expect(first?.idempotencyKey).toEqual(expect.any(String));
    expect(first?.holderSecret?.length).toBeGreaterThanOrEqual(16);
    for (const request of rest) {
      expect(request.idempotencyKey).toBe(first?.idempotencyKey);
      expect(request.holderSecret).toBe(first?.holderSecret);
    }
  });

  it('gives up the acquire after attemptsMax attempts and rethrows the last error without running the work', async () => {
    const client = new FakeLeaseClient({ acquire: Array(10).fill('NO_CAPACITY') });
    const work = vi.fn();
    const running = withLease(client, acquireRequest, work, { acquireRetry: { attemptsMax: 3 } });
    const outcome = expect(running).rejects.toMatchObject({ code: 'NO_CAPACITY' });
    await vi.advanceTimersByTimeAsync(1_000);
    await outcome;
    expect(client.calls.acquire).toHaveLength(3);
    expect(work).not.toHaveBeenCalled();
    expect(vi.getTimerCount()).toBe(0);
  });

  it('starts no acquire attempt later than withinMs after the first', async () => {
    const client = new FakeLeaseClient({ acquire: Array(10).fill('NOT_READY') });
    const running = withLease(client, acquireRequest, vi.fn(), { acquireRetry: { withinMs: 250 } });
    const outcome = expect(running).rejects.toMatchObject({ code: 'NOT_READY' });
    await vi.advanceTimersByTimeAsync(1_000);
    await outcome;
    expect(relative(client.calls.acquire)).toEqual([0, 100]);
  });

  it('does not retry an acquire answered with a final error', async () => {
    const client = new FakeLeaseClient({ acquire: ['TTL_OUT_OF_RANGE'] });
    await expect(withLease(client, acquireRequest, vi.fn())).rejects.toMatchObject({
      code: 'TTL_OUT_OF_RANGE',
    });
    expect(client.calls.acquire).toHaveLength(1);
  });

  it('refuses acquire retry bounds beyond its limits', async () => {
    const client = new FakeLeaseClient();
    await expect(
      withLease(client, acquireRequest, vi.fn(), { acquireRetry: { attemptsMax: 1_000 } }),
    ).rejects.toBeInstanceOf(RangeError);
    expect(client.calls.acquire).toEqual([]);
  });

  it('runs no work when the grant arrives after its local deadline', async () => {
    const client = new FakeLeaseClient();
    client.acquireLatencyMs = 3_000;
    const work = vi.fn();
    const running = withLease(client, acquireRequest, work);
    const outcome = expect(running).rejects.toMatchObject({
      code: 'LEASE_EXPIRED',
      details: { local: true },
    });
    await vi.advanceTimersByTimeAsync(3_000);
    await outcome;
    expect(work).not.toHaveBeenCalled();
    expect(vi.getTimerCount()).toBe(0);
  });
});
