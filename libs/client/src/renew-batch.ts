import type { LeaseError, LeaseView, RenewRequestV1 } from '@lease/events';
import type { z } from 'zod';

export type RenewRequest = z.infer<typeof RenewRequestV1>;
export type RenewOutcome = { ok: true; lease: LeaseView } | { ok: false; error: LeaseError };

export interface RenewBatcherOptions {
  /** Renewals per request at most; 1 sends every renewal alone. */
  readonly batchMax: number;
  /** One renewal, alone (`renew`). Rejects with a LeaseError. */
  readonly one: (request: RenewRequest, timeoutMs: number) => Promise<LeaseView>;
  /** Several renewals of distinct leases in one request (`renew-many`): one outcome each, in order. */
  readonly many: (requests: RenewRequest[], timeoutMs: number) => Promise<RenewOutcome[]>;
}

interface Pending {
  readonly request: RenewRequest;
  readonly resolve: (lease: LeaseView) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * Coalesces renewals: those asked for in one turn of the event loop (a worker-agent's
 * leases falling due together, or many holders in one process) leave in one request per
 * timeout, so each renewal costs the gateway an append and the holder no round trip of its
 * own. A lease asked twice in one turn goes in two requests. Nothing waits longer than
 * that turn: the batch is sent from `setImmediate`.
 */
export const createRenewBatcher = (options: RenewBatcherOptions) => {
  /** By timeout: a request carries renewals that wait equally long. */
  const queued = new Map<number, Pending[]>();
  let scheduled = false;

  const send = async (batch: readonly Pending[], timeoutMs: number) => {
    const [first] = batch;
    if (batch.length === 1 && first) {
      await options.one(first.request, timeoutMs).then(first.resolve, first.reject);
      return;
    }
    try {
      const outcomes = await options.many(
        batch.map((pending) => pending.request),
        timeoutMs,
      );
      batch.forEach((pending, i) => {
        const outcome = outcomes[i];
        if (outcome === undefined) pending.reject(new Error(`no answer for renewal ${i} of ${batch.length}`));
        else if (outcome.ok) pending.resolve(outcome.lease);
        else pending.reject(outcome.error);
      });
    } catch (error) {
      for (const pending of batch) pending.reject(error);
    }
  };

  const flush = () => {
    scheduled = false;
    const queues = [...queued];
    queued.clear();
    for (const [timeoutMs, queue] of queues) {
      let batch: Pending[] = [];
      let ids = new Set<string>();
      for (const pending of queue) {
        if (batch.length >= options.batchMax || ids.has(pending.request.leaseId)) {
          void send(batch, timeoutMs);
          batch = [];
          ids = new Set();
        }
        batch.push(pending);
        ids.add(pending.request.leaseId);
      }
      void send(batch, timeoutMs);
    }
  };

  return (request: RenewRequest, timeoutMs: number): Promise<LeaseView> => {
    if (options.batchMax <= 1) return options.one(request, timeoutMs);
    return new Promise((resolve, reject) => {
      const queue = queued.get(timeoutMs);
      if (queue) queue.push({ request, resolve, reject });
      else queued.set(timeoutMs, [{ request, resolve, reject }]);
      if (!scheduled) {
        scheduled = true;
        setImmediate(flush);
      }
    });
  };
};
