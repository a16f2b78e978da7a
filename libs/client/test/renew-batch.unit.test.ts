import { COMMAND_SUBJECTS, type LeaseView, RENEW_BATCH_MAX } from '@lease/events';
import { describe, expect, it } from 'vitest';
import { createLeaseClient, leaseHandle } from '../src/client.js';
import { TTL_MS, view } from './fake-client.js';

const SECRET = 'a-holder-secret-of-32-characters';
const utf8 = new TextEncoder();
const text = new TextDecoder();

interface Sent {
  readonly subject: string;
  readonly body: { renewals?: { leaseId: string }[]; leaseId?: string };
  readonly timeoutMs: number | undefined;
}

/**
 * A client over a fake connection that answers renewals the way the gateway does: every
 * lease whose id starts with "gone" is revoked, every other one renewed.
 */
const clientWith = (options: { renewBatchMax?: number; fail?: Error } = {}) => {
  const sent: Sent[] = [];
  const answer = (leaseId: string) =>
    leaseId.startsWith('gone')
      ? {
          ok: false,
          error: {
            code: 'LEASE_REVOKED',
            retryable: false,
            message: `${leaseId} revoked`,
            details: { leaseId },
          },
        }
      : { ok: true, lease: view({ leaseId, renewals: 1 }) };
  const nc = {
    request: async (subject: string, data?: Uint8Array, opts?: { timeout?: number }) => {
      const body = JSON.parse(text.decode(data));
      sent.push({ subject, body, timeoutMs: opts?.timeout });
      if (options.fail) throw options.fail;
      const reply =
        subject === COMMAND_SUBJECTS.renewMany
          ? {
              ok: true,
              result: { results: body.renewals.map((r: { leaseId: string }) => answer(r.leaseId)) },
            }
          : (() => {
              const one = answer(body.leaseId);
              return one.ok ? { ok: true, result: { lease: one.lease } } : one;
            })();
      return { data: utf8.encode(JSON.stringify(reply)) };
    },
  };
  const client = createLeaseClient({
    nc: nc as never,
    ...(options.renewBatchMax === undefined ? {} : { renewBatchMax: options.renewBatchMax }),
  });
  return { client, sent };
};

const lease = (leaseId: string) =>
  leaseHandle({ view: view({ leaseId }), holderSecret: SECRET, sentAtMonotonicMs: 0, ttlMs: TTL_MS });

const settle = <T>(promises: Promise<T>[]) => Promise.allSettled(promises);

describe('renewals asked for in one turn of the event loop', () => {
  it('leave in one renew-many request, and each caller gets its own lease or its own error', async () => {
    const { client, sent } = clientWith();
    const outcomes = await settle(['a', 'gone-b', 'c'].map((id) => client.renew(lease(id))));
    expect(sent.map((s) => s.subject)).toEqual([COMMAND_SUBJECTS.renewMany]);
    expect(sent[0]?.body.renewals?.map((r) => r.leaseId)).toEqual(['a', 'gone-b', 'c']);
    expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    const [a, b, c] = outcomes;
    expect(a?.status === 'fulfilled' && a.value.view.leaseId).toBe('a');
    expect(c?.status === 'fulfilled' && (c.value.view as LeaseView).renewals).toBe(1);
    expect(b?.status === 'rejected' && b.reason).toMatchObject({ code: 'LEASE_REVOKED', retryable: false });
  });

  it('send a lone renewal on renew, and renewals of later turns in requests of their own', async () => {
    const { client, sent } = clientWith();
    await client.renew(lease('a'));
    await Promise.all([client.renew(lease('b')), client.renew(lease('c'))]);
    expect(sent.map((s) => s.subject)).toEqual([COMMAND_SUBJECTS.renew, COMMAND_SUBJECTS.renewMany]);
  });

  it('split at the batch bound, put a lease asked twice in a second request, and group by timeout', async () => {
    const { client, sent } = clientWith({ renewBatchMax: 2 });
    await Promise.all([
      client.renew(lease('a')),
      client.renew(lease('b')),
      client.renew(lease('c')),
      client.renew(lease('c')),
      client.renew(lease('d'), { timeoutMs: 1_234 }),
      client.renew(lease('e'), { timeoutMs: 1_234 }),
    ]);
    const requests = sent.map((s) => ({
      ids: s.body.renewals?.map((r) => r.leaseId) ?? [s.body.leaseId],
      timeoutMs: s.timeoutMs,
    }));
    expect(requests).toEqual([
      { ids: ['a', 'b'], timeoutMs: 5_000 },
      { ids: ['c'], timeoutMs: 5_000 },
      { ids: ['c'], timeoutMs: 5_000 },
      { ids: ['d', 'e'], timeoutMs: 1_234 },
    ]);
  });

  it('each go alone when batching is off', async () => {
    const { client, sent } = clientWith({ renewBatchMax: 1 });
    await Promise.all([client.renew(lease('a')), client.renew(lease('b'))]);
    expect(sent.map((s) => s.subject)).toEqual([COMMAND_SUBJECTS.renew, COMMAND_SUBJECTS.renew]);
  });

  it('all fail with a retryable error when the request gets no answer', async () => {
    const { client } = clientWith({ fail: new Error('TIMEOUT') });
    const outcomes = await settle([client.renew(lease('a')), client.renew(lease('b'))]);
    for (const outcome of outcomes)
      expect(outcome.status === 'rejected' && outcome.reason).toMatchObject({
        code: 'UNAVAILABLE',
        retryable: true,
      });
  });

  it('are refused one by one when invalid, without failing the others', async () => {
    const { client, sent } = clientWith();
    const bad = leaseHandle({
      view: view({ leaseId: 'b' }),
      holderSecret: 'short',
      sentAtMonotonicMs: 0,
      ttlMs: 1,
    });
    const outcomes = await settle([client.renew(lease('a')), client.renew(bad)]);
    expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected']);
    expect(outcomes[1]?.status === 'rejected' && outcomes[1].reason).toMatchObject({
      code: 'INVALID_REQUEST',
    });
    expect(sent.map((s) => s.subject)).toEqual([COMMAND_SUBJECTS.renew]);
  });

  it('go at most RENEW_BATCH_MAX to a request, what the gateway accepts', async () => {
    const { client, sent } = clientWith({ renewBatchMax: 10_000 }); // capped at RENEW_BATCH_MAX
    await Promise.all(Array.from({ length: RENEW_BATCH_MAX + 44 }, (_, i) => client.renew(lease(`l-${i}`))));
    expect(sent.map((s) => s.body.renewals?.length)).toEqual([RENEW_BATCH_MAX, 44]);
  });
});
