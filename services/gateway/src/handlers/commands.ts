import { createHash, randomBytes, randomUUID } from 'node:crypto';
import type { Projection } from '@lease/bus';
import {
  type AcquireLease,
  type AcquireRequestV1,
  type CancelRequestV1,
  type DefineLimitRequestV1,
  decide,
  type GetRequestV1,
  type LeaseCommand,
  LeaseError,
  LIST_LEASES_MAX,
  type ListRequestV1,
  leaseError,
  leaseView,
  limitView,
  limitViews,
  matchesFilter,
  type Policy,
  type ReleaseRequestV1,
  type RemoveLimitRequestV1,
  type RenewManyRequestV1,
  type RenewRequestV1,
  type RevokeRequestV1,
  type SetRequesterLimitRequestV1,
} from '@lease/events';
import type { z } from 'zod';
import type { Admission } from '../adapters/admission.js';
import type { LogWriter } from '../adapters/log-writer.js';
import type { Waiting } from '../adapters/waiting.js';
import type { GatewayMetrics } from '../metrics.js';

/** Decide-append rounds for one lease command before answering a retryable STALE_VIEW. */
export const LIFECYCLE_ATTEMPTS = 5;

export type Result<T> = { ok: true; result: T } | { ok: false; error: LeaseError };

export interface CommandDeps {
  readonly projection: Projection;
  readonly admission: Admission;
  readonly waiting: Waiting;
  /** This replica's name: the owner of the acquires it holds while they wait. */
  readonly instance: string;
  readonly waitMaxMs: number;
  readonly writer: LogWriter;
  readonly policy: Policy;
  readonly metrics: GatewayMetrics;
  readonly nowMs: () => number;
}

export const hashSecret = (secret: string): string => createHash('sha256').update(secret).digest('hex');
const newSecret = (): string => randomBytes(24).toString('base64url');
const newLeaseId = (): string => randomUUID().replaceAll('-', '');

const fail = (error: LeaseError): Result<never> => ({ ok: false, error });
const lagging = () => leaseError('NOT_READY', 'this replica could not catch up with the log in time; retry');

/** The gateway's verbs: validated input in, a result or a typed error out. No business rule lives here. */
export const createCommands = (deps: CommandDeps) => {
  const { projection, admission, waiting, writer, policy, metrics, nowMs } = deps;

  const acquire = async (request: z.infer<typeof AcquireRequestV1>) => {
    const holderSecret = request.holderSecret ?? newSecret();
    const secretHash = hashSecret(holderSecret);
    const leaseId = request.leaseId ?? newLeaseId();
    const waitMs = request.noWait ? 0 : Math.min(request.waitMs ?? 0, deps.waitMaxMs);
    const firstTryMs = nowMs();
    const command = (now: number): AcquireLease => ({
      type: 'AcquireLease',
      leaseId,
      leaseIdChosen: request.leaseId !== undefined,
      requester: request.requester,
      holder: request.holder,
      slots: request.slots,
      ttlMs: request.ttlMs,
      secretHash,
      idempotencyKey: request.idempotencyKey,
      metadata: request.metadata,
      waitUntilMs: waitMs > 0 ? firstTryMs + waitMs : undefined,
      owner: deps.instance,
      nowMs: now,
    });
    const admitted = await admission.acquire(command);
    const waited = admitted.ok && 'queued' in admitted;
    const outcome = waited ? await waiting.hold(leaseId, command, admitted.queued.expiresAtMs) : admitted;
    if (!outcome.ok) return fail(outcome.error);
    const lease = projection.state.leases.get(outcome.grant.leaseId);
    if (!lease)
      return fail(
        new LeaseError('NOT_READY', 'the grant is not folded yet; retry with the same idempotency key'),
      );
    // A replay hands the secret back only to whoever presented it in the first place.
    const showSecret = !outcome.replayed || lease.secretHash === secretHash;
    return {
      ok: true as const,
      result: {
        lease: leaseView(lease),
        replayed: outcome.replayed,
        ...(showSecret ? { holderSecret } : {}),
        // The grant was decided at its deadline minus its TTL, on this gateway's clock.
        ...(waited
          ? { waitedMs: Math.max(0, outcome.grant.deadlineMs - outcome.grant.ttlMs - firstTryMs) }
          : {}),
      },
    };
  };

  /** Renew, release and revoke: decide on the lease as folded, append conditional on its last sequence. */
  const lifecycle = async (leaseId: string, command: (nowMs: number) => LeaseCommand) => {
    let confirmed = false;
    for (let attempt = 0; attempt < LIFECYCLE_ATTEMPTS; attempt++) {
      const decision = decide(projection.state, command(nowMs()), policy);
      if (!decision.ok && !confirmed) {
        // Never answer "unknown lease" (final) from a view that lags another replica's grant.
        if (!(await projection.catchUp())) return fail(lagging());
        confirmed = true;
        continue;
      }
      if (!decision.ok) return fail(decision.error);
      const event = decision.events[0];
      const lease = projection.state.leases.get(leaseId)!;
      if (!event) return { ok: true as const, result: { lease: leaseView(lease) } };
      const appended = await writer.append(event, lease.lastSubjectSeq);
      if (appended.ok) {
        if (event.type === 'LeaseRenewed') metrics.renewals += 1;
        else if (event.type === 'LeaseReleased') metrics.releases += 1;
        else if (event.type === 'LeaseRevoked') metrics.revocations += 1;
        return {
          ok: true as const,
          result: { lease: leaseView(projection.state.leases.get(leaseId) ?? lease) },
        };
      }
      if (!appended.conflict) return fail(appended.error);
      await projection.catchUp();
    }
    return fail(
      leaseError('STALE_VIEW', `lease ${leaseId} kept changing under ${LIFECYCLE_ATTEMPTS} attempts; retry`),
    );
  };

  const renew = (request: z.infer<typeof RenewRequestV1>) =>
    lifecycle(request.leaseId, (now) => ({
      type: 'RenewLease',
      leaseId: request.leaseId,
      secretHash: hashSecret(request.holderSecret),
      ttlMs: request.ttlMs,
      nowMs: now,
    }));

  /**
   * Each renewal decided and appended on its own subject as if sent alone, all at once: one
   * request and one reply for many leases, the appends pipelined.
   */
  const renewMany = async (request: z.infer<typeof RenewManyRequestV1>) => {
    const outcomes = await Promise.all(request.renewals.map(renew));
    const results = outcomes.map((outcome) => {
      if (outcome.ok) return { ok: true as const, lease: outcome.result.lease };
      metrics.reject(outcome.error.code);
      return { ok: false as const, error: outcome.error.toJSON() };
    });
    return { ok: true as const, result: { results } };
  };

  const release = (request: z.infer<typeof ReleaseRequestV1>) =>
    lifecycle(request.leaseId, (now) => ({
      type: 'ReleaseLease',
      leaseId: request.leaseId,
      secretHash: hashSecret(request.holderSecret),
      detail: request.detail,
      nowMs: now,
    }));

  const revoke = (request: z.infer<typeof RevokeRequestV1>) =>
    lifecycle(request.leaseId, (now) => ({
      type: 'RevokeLease',
      leaseId: request.leaseId,
      reason: request.reason,
      graceMs: 0,
      actor: request.actor,
      detail: request.detail,
      nowMs: now,
    }));

  const get = async (request: z.infer<typeof GetRequestV1>) => {
    if (!projection.state.leases.has(request.leaseId) && !(await projection.catchUp()))
      return fail(lagging());
    const lease = projection.state.leases.get(request.leaseId);
    if (!lease)
      return fail(leaseError('UNKNOWN_LEASE', `no lease ${request.leaseId}`, { leaseId: request.leaseId }));
    return { ok: true as const, result: { lease: leaseView(lease) } };
  };

  const list = async (request: z.infer<typeof ListRequestV1>) => {
    const max = request.max ?? LIST_LEASES_MAX;
    const leases = [];
    let total = 0;
    for (const lease of projection.state.leases.values()) {
      if (!matchesFilter(lease, request)) continue;
      total += 1;
      if (leases.length < max) leases.push(leaseView(lease));
    }
    return { ok: true as const, result: { leases, total, truncated: total > leases.length } };
  };

  const defineLimit = async (request: z.infer<typeof DefineLimitRequestV1>) => {
    const outcome = await admission.admin((now) => ({ type: 'DefineLimit', ...request, nowMs: now }));
    if (!outcome.ok) return fail(outcome.error);
    return { ok: true as const, result: { limit: limitView(projection.state, request.limit) } };
  };

  const removeLimit = async (request: z.infer<typeof RemoveLimitRequestV1>) => {
    const outcome = await admission.admin((now) => ({ type: 'RemoveLimit', ...request, nowMs: now }));
    if (!outcome.ok) return fail(outcome.error);
    return { ok: true as const, result: { limit: limitView(projection.state, request.limit) } };
  };

  const setRequesterLimit = async (request: z.infer<typeof SetRequesterLimitRequestV1>) => {
    const outcome = await admission.admin((now) => ({
      type: 'SetRequesterLimit',
      ...request,
      nowMs: now,
    }));
    if (!outcome.ok) return fail(outcome.error);
    return { ok: true as const, result: { requester: request.requester, leasesMax: request.leasesMax } };
  };

  const cancel = async (request: z.infer<typeof CancelRequestV1>) => {
    const outcome = await admission.admin((now) => ({
      type: 'EndWait',
      leaseId: request.leaseId,
      secretHash: hashSecret(request.holderSecret),
      reason: 'cancelled',
      nowMs: now,
    }));
    if (!outcome.ok) return fail(outcome.error);
    return { ok: true as const, result: { leaseId: request.leaseId, cancelled: true } };
  };

  const listLimits = async () => ({
    ok: true as const,
    result: {
      limits: limitViews(projection.state),
      defaultLeasesPerRequester: projection.state.defaultLeasesMax,
      requesterLimits: Object.fromEntries(projection.state.requesterLimits),
    },
  });

  return {
    acquire,
    cancel,
    renew,
    renewMany,
    release,
    revoke,
    get,
    list,
    defineLimit,
    removeLimit,
    setRequesterLimit,
    listLimits,
  };
};
