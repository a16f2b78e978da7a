import { type AcquireResultV1, LeaseError, LeaseResultV1, RenewRequestV1 } from '@lease/events';
import { describe, expect, it } from 'vitest';
import { decodeReply, grantedLease, leaseHandle, newHolderSecret, toLeaseError } from '../src/client.js';
import { TTL_MS, view } from './fake-client.js';

const bytes = (value: unknown) =>
  new TextEncoder().encode(typeof value === 'string' ? value : JSON.stringify(value));
const SECRET = 'a-holder-secret-of-32-characters';

describe('decoding a reply', () => {
  it('returns the typed result of an ok reply', () => {
    const decoded = decodeReply(
      'lease.cmd.get',
      LeaseResultV1,
      bytes({ ok: true, result: { lease: view() } }),
    );
    expect(decoded).toEqual({ ok: true, result: { lease: view() } });
  });

  it('returns the LeaseError an error reply carries, with its code, retryable flag and details', () => {
    const decoded = decodeReply(
      'lease.cmd.renew',
      LeaseResultV1,
      bytes({
        ok: false,
        error: {
          code: 'LEASE_REVOKED',
          retryable: false,
          message: 'revoked',
          details: { leaseId: 'lease-1' },
        },
      }),
    );
    expect(decoded.ok).toBe(false);
    if (decoded.ok) return;
    expect(decoded.error).toBeInstanceOf(LeaseError);
    expect(decoded.error).toMatchObject({
      code: 'LEASE_REVOKED',
      retryable: false,
      message: 'revoked',
      details: { leaseId: 'lease-1' },
    });
  });

  it('turns an error code this client does not know into a retryable UNAVAILABLE that names it', () => {
    const decoded = decodeReply(
      'lease.cmd.renew',
      LeaseResultV1,
      bytes({
        ok: false,
        error: { code: 'SOMETHING_NEW', retryable: false, message: 'from a newer gateway' },
      }),
    );
    expect(decoded).toMatchObject({ ok: false, error: { code: 'UNAVAILABLE', retryable: true } });
    if (!decoded.ok) expect(decoded.error.message).toContain('SOMETHING_NEW');
  });

  it('turns a reply that is not JSON into a retryable UNAVAILABLE', () => {
    expect(decodeReply('lease.cmd.get', LeaseResultV1, bytes('<html>'))).toMatchObject({
      ok: false,
      error: { code: 'UNAVAILABLE', details: { invalidReply: true, subject: 'lease.cmd.get' } },
    });
  });

  it('turns an ok reply that breaks its schema into a retryable UNAVAILABLE', () => {
    expect(
      decodeReply('lease.cmd.get', LeaseResultV1, bytes({ ok: true, result: { lease: { leaseId: 1 } } })),
    ).toMatchObject({ ok: false, error: { code: 'UNAVAILABLE', details: { invalidReply: true } } });
  });
});

describe('the handle of a granted lease', () => {
  const granted = (overrides: Partial<ReturnType<typeof AcquireResultV1.parse>> = {}) => ({
    lease: view(),
    holderSecret: SECRET,
    replayed: false,
    ...overrides,
  });

  it('puts the local deadline a TTL after the send, whatever the gateway deadline says', () => {
    const lease = grantedLease(granted({ lease: view({ deadlineMs: 9e15 }) }), SECRET, 1_000, TTL_MS);
    expect(lease).toMatchObject({
      leaseId: 'lease-1',
      fencingToken: 7,
      holderSecret: SECRET,
      sentAtMonotonicMs: 1_000,
      localDeadlineMonotonicMs: 1_000 + TTL_MS,
      replayed: false,
    });
  });

  it('measures with the smaller of the asked and granted TTLs', () => {
    expect(
      grantedLease(granted({ lease: view({ ttlMs: 2_000 }) }), SECRET, 0, TTL_MS).localDeadlineMonotonicMs,
    ).toBe(2_000);
    expect(
      leaseHandle({ view: view(), holderSecret: SECRET, sentAtMonotonicMs: 0, ttlMs: 1_500 }).ttlMs,
    ).toBe(1_500);
  });

  it('measures a replayed grant from the first attempt with its idempotency key', () => {
    const lease = grantedLease(granted({ replayed: true }), SECRET, 5_000, TTL_MS, 1_000);
    expect(lease.localDeadlineMonotonicMs).toBe(1_000 + TTL_MS);
  });

  it('measures a fresh grant from its own send even when an earlier attempt was sent', () => {
    const lease = grantedLease(granted(), SECRET, 5_000, TTL_MS, 1_000);
    expect(lease.localDeadlineMonotonicMs).toBe(5_000 + TTL_MS);
  });

  it('refuses with FORBIDDEN a replayed grant that does not hand back this holder secret', () => {
    expect(() =>
      grantedLease(granted({ replayed: true, holderSecret: undefined }), SECRET, 0, TTL_MS),
    ).toThrow(expect.objectContaining({ code: 'FORBIDDEN' }));
  });

  it('refuses a replayed grant whose lease has already ended, with the code of how it ended', () => {
    expect(() =>
      grantedLease(granted({ replayed: true, lease: view({ status: 'released' }) }), SECRET, 0, TTL_MS),
    ).toThrow(expect.objectContaining({ code: 'LEASE_RELEASED' }));
    expect(() =>
      grantedLease(granted({ replayed: true, lease: view({ status: 'revoked' }) }), SECRET, 0, TTL_MS),
    ).toThrow(expect.objectContaining({ code: 'LEASE_REVOKED' }));
  });
});

describe('errors of a call', () => {
  it('maps a transport failure to UNAVAILABLE, keeping the cause and the subject', () => {
    const cause = Object.assign(new Error('503'), { name: 'NoRespondersError' });
    const error = toLeaseError(cause, 'lease.cmd.renew');
    expect(error).toMatchObject({
      code: 'UNAVAILABLE',
      retryable: true,
      details: { subject: 'lease.cmd.renew' },
    });
    expect(error.cause).toBe(cause);
  });

  it('passes a LeaseError through unchanged', () => {
    const error = new LeaseError('NOT_READY', 'catching up');
    expect(toLeaseError(error)).toBe(error);
  });

  it('keeps the code of a lease error from another copy of the package', () => {
    const foreign = { name: 'LeaseError', code: 'LEASE_EXPIRED', retryable: false, message: 'expired' };
    expect(toLeaseError(foreign)).toMatchObject({ code: 'LEASE_EXPIRED', retryable: false, cause: foreign });
  });
});

describe('holder secrets', () => {
  it('are random, URL-safe and long enough for the gateway', () => {
    const secrets = new Set(Array.from({ length: 100 }, newHolderSecret));
    expect(secrets.size).toBe(100);
    for (const secret of secrets) {
      expect(secret).toMatch(/^[A-Za-z0-9_-]{32}$/);
      expect(RenewRequestV1.safeParse({ leaseId: 'lease-1', holderSecret: secret }).success).toBe(true);
    }
  });
});
