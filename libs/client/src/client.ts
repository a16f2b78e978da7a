import { randomBytes } from 'node:crypto';
import {
  AcquireRequestV1,
  AcquireResultV1,
  CancelRequestV1,
  CancelResultV1,
  type Clock,
  COMMAND_SUBJECTS,
  compiled,
  DefineLimitRequestV1,
  GetRequestV1,
  isLeaseError,
  LeaseError,
  LeaseListResultV1,
  LeaseResultV1,
  type LeaseView,
  LeaseViewV1,
  LimitListResultV1,
  LimitResultV1,
  type LimitView,
  ListLimitsRequestV1,
  ListRequestV1,
  leaseErrorFromJson,
  localDeadlineMs,
  okReply,
  RENEW_BATCH_MAX,
  ReleaseRequestV1,
  RemoveLimitRequestV1,
  RenewRequestV1,
  RequesterLimitResultV1,
  RevokeRequestV1,
  SetRequesterLimitRequestV1,
} from '@lease/events';
import type { NatsConnection } from '@nats-io/transport-node';
import { z } from 'zod';
import { createRenewBatcher } from './renew-batch.js';

/** A request waits this long for the gateway's answer unless the client or the call says otherwise. */
export const REQUEST_TIMEOUT_DEFAULT_MS = 5_000;
/** The longest request timeout accepted, on the client or on one call. */
export const REQUEST_TIMEOUT_MAX_MS = 60_000;
/** An acquire that waits for slots (waitMs) gets its wait on top of the timeout, up to this much. */
export const ACQUIRE_WAIT_MAX_MS = 10 * 60_000;
/**
 * Renewals per renew-many request unless told otherwise. Smaller than the gateway's bound on
 * purpose: with 100 holders renewing back to back, requests of at most 32 kept several in
 * flight and renewed 30-32k/s where one request of 100 renewed 24k/s (ADR 0010).
 */
export const RENEW_BATCH_DEFAULT = 32;
/** 24 random bytes: 32 base64url characters, within the 16..128 the gateway accepts. */
const HOLDER_SECRET_BYTES = 24;

/** The holder's own clock: wall time for display, the monotonic clock for every local deadline. */
export const systemClock: Clock = {
  nowMs: () => Date.now(),
  monotonicMs: () => performance.now(),
};

export const newHolderSecret = (): string => randomBytes(HOLDER_SECRET_BYTES).toString('base64url');

export type AcquireRequest = z.input<typeof AcquireRequestV1>;
export type RevokeRequest = z.input<typeof RevokeRequestV1>;
export type GetRequest = z.input<typeof GetRequestV1>;
export type ListRequest = z.input<typeof ListRequestV1>;
export type DefineLimitRequest = z.input<typeof DefineLimitRequestV1>;
export type RemoveLimitRequest = z.input<typeof RemoveLimitRequestV1>;
export type SetRequesterLimitRequest = z.input<typeof SetRequesterLimitRequestV1>;
export type LeaseList = z.infer<typeof LeaseListResultV1>;
export type LimitList = z.infer<typeof LimitListResultV1>;
export type RequesterLimit = z.infer<typeof RequesterLimitResultV1>;

/**
 * What a holder keeps of a granted lease. Immutable: a renewal returns a new handle.
 * `deadlineMs` is the gateway's (its wall clock) and is for display only; the holder acts
 * on `localDeadlineMonotonicMs`, which is never later than the gateway's deadline.
 */
export interface Lease {
  readonly leaseId: string;
  readonly fencingToken: number;
  readonly deadlineMs: number;
  readonly holderSecret: string;
  readonly view: LeaseView;
  /** Monotonic: read before the request that confirmed this lease was sent. */
  readonly sentAtMonotonicMs: number;
  /** The TTL the local deadline is measured with. */
  readonly ttlMs: number;
  /** Monotonic: sentAtMonotonicMs + ttlMs. Past it the holder considers the lease lost. */
  readonly localDeadlineMonotonicMs: number;
  /** True when the acquire found its idempotency key already granted: this is that lease. */
  readonly replayed: boolean;
}

export interface CallOptions {
  /** Overrides the client's request timeout for this call. */
  readonly timeoutMs?: number;
}

export interface AcquireCallOptions extends CallOptions {
  /**
   * Monotonic time the first attempt with this idempotency key was sent. A replayed grant
   * was made after that first attempt, not after this one, so its local deadline is
   * measured from here. Without it a replay is measured from this call's send, which is
   * only right if no earlier attempt with the key was sent.
   */
  readonly firstSentAtMonotonicMs?: number;
}

export interface RenewCallOptions extends CallOptions {
  /** A new TTL for this and later renewals; the lease's own TTL otherwise. */
  readonly ttlMs?: number;
}

export interface ReleaseCallOptions extends CallOptions {
  readonly detail?: string;
}

/** Every verb of the gateway. Each resolves to its typed result or rejects with a LeaseError. */
export interface LeaseClient {
  /** The clock local deadlines are measured on. */
  readonly clock: Clock;
  /** The default request timeout. */
  readonly timeoutMs: number;
  /** Sends a holder secret of its own (generated unless given) so that a retry can keep the lease. */
  acquire(request: AcquireRequest, options?: AcquireCallOptions): Promise<Lease>;
  /** Ends the wait of an acquire sent with `waitMs` (and this `leaseId` and secret): it answers WAIT_CANCELLED. */
  cancel(waiting: Pick<Lease, 'leaseId' | 'holderSecret'>, options?: CallOptions): Promise<void>;
  renew(lease: Lease, options?: RenewCallOptions): Promise<Lease>;
  release(lease: Pick<Lease, 'leaseId' | 'holderSecret'>, options?: ReleaseCallOptions): Promise<LeaseView>;
  revoke(request: RevokeRequest, options?: CallOptions): Promise<LeaseView>;
  get(request: GetRequest, options?: CallOptions): Promise<LeaseView>;
  list(request?: ListRequest, options?: CallOptions): Promise<LeaseList>;
  defineLimit(request: DefineLimitRequest, options?: CallOptions): Promise<LimitView | null>;
  removeLimit(request: RemoveLimitRequest, options?: CallOptions): Promise<LimitView | null>;
  listLimits(options?: CallOptions): Promise<LimitList>;
  setRequesterLimit(request: SetRequesterLimitRequest, options?: CallOptions): Promise<RequesterLimit>;
}

export interface LeaseClientOptions {
  /** Only `request` is used: any NATS connection (or a test double of one) will do. */
  readonly nc: Pick<NatsConnection, 'request'>;
  readonly timeoutMs?: number;
  readonly clock?: Clock;
  /**
   * Renewals asked for in one turn of the event loop travel together, at most this many
   * per `renew-many` request (RENEW_BATCH_MAX at most; RENEW_BATCH_DEFAULT unless given);
   * 1 sends each in its own `renew`.
   */
  readonly renewBatchMax?: number;
}

const checkTimeout = (timeoutMs: number, what: string): number => {
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > REQUEST_TIMEOUT_MAX_MS)
    throw new RangeError(
      `${what} must be an integer from 1 to ${REQUEST_TIMEOUT_MAX_MS} ms, not ${timeoutMs}`,
    );
  return timeoutMs;
};

const utf8Decoder = new TextDecoder('utf-8', { fatal: true });

/** Any error a call can end in, as a LeaseError: transport failures and surprises are UNAVAILABLE. */
export const toLeaseError = (cause: unknown, subject?: string): LeaseError => {
  if (cause instanceof LeaseError) return cause;
  // Another copy of @lease/events: same code, rebuilt as this copy's class.
  if (isLeaseError(cause)) {
    const { code, message, details } = cause;
    return new LeaseError(code, message, { cause, ...(details ? { details: { ...details } } : {}) });
  }
  const message = cause instanceof Error ? cause.message : String(cause);
  return new LeaseError('UNAVAILABLE', subject ? `request to ${subject} failed: ${message}` : message, {
    cause,
    ...(subject ? { details: { subject } } : {}),
  });
};

/**
 * The error body is read loosely on purpose: a newer gateway may answer a code this client
 * does not know, and leaseErrorFromJson keeps it visible as a retryable UNAVAILABLE.
 */
const ErrorBody = z.object({
  ok: z.literal(false),
  error: z.object({
    code: z.string(),
    message: z.string().optional(),
    details: z.record(z.string(), z.unknown()).optional(),
  }),
});

/** Each renewal's answer: its lease, or its error read as loosely as ErrorBody. */
const RenewManyReply = z.object({
  results: z.array(z.union([z.object({ ok: z.literal(true), lease: LeaseViewV1 }), ErrorBody])),
});

const invalidReply = (subject: string, problem: string, details?: Record<string, unknown>) =>
  new LeaseError('UNAVAILABLE', `the reply on ${subject} is unusable: ${problem}`, {
    details: { subject, invalidReply: true, ...details },
  });

/** `okReply(result)`, built and compiled once per result schema. */
const okReplyOf = (result: z.ZodType): z.ZodType => {
  let schema = OK_REPLIES.get(result);
  if (!schema) {
    schema = compiled(okReply(result));
    OK_REPLIES.set(result, schema);
  }
  return schema;
};
const OK_REPLIES = new WeakMap<z.ZodType, z.ZodType>();

/** Bytes of a reply to the typed result, or the LeaseError it carries or amounts to. Never throws. */
export const decodeReply = <S extends z.ZodType>(
  subject: string,
  resultSchema: S,
  data: Uint8Array,
): { ok: true; result: z.infer<S> } | { ok: false; error: LeaseError } => {
  let raw: unknown;
  try {
    raw = JSON.parse(utf8Decoder.decode(data));
  } catch {
    return { ok: false, error: invalidReply(subject, 'not UTF-8 JSON', { bytes: data.length }) };
  }
  // Only a reply saying ok: false is read as an error: trying every reply as one built a
  // ZodError for each success.
  if ((raw as { ok?: unknown } | null)?.ok === false) {
    const failed = compiled(ErrorBody).safeParse(raw);
    if (failed.success) return { ok: false, error: leaseErrorFromJson(failed.data.error) };
  }
  const parsed = okReplyOf(resultSchema).safeParse(raw);
  if (!parsed.success) {
    return {
      ok: false,
      error: invalidReply(subject, parsed.error.issues[0]?.message ?? 'schema mismatch', {
        issues: parsed.error.issues,
      }),
    };
  }
  return { ok: true, result: (parsed.data as { result: z.infer<S> }).result };
};

/**
 * A grant's handle. The local deadline is measured from before the send (the gateway
 * decided after it), with the smaller of the asked and granted TTLs; a replayed grant is
 * measured from the first attempt with its key, which it may be the answer to.
 */
export const leaseHandle = (input: {
  readonly view: LeaseView;
  readonly holderSecret: string;
  readonly sentAtMonotonicMs: number;
  readonly ttlMs: number;
  readonly replayed?: boolean;
  readonly firstSentAtMonotonicMs?: number;
}): Lease => {
  const { view, holderSecret, replayed = false } = input;
  const sentAtMonotonicMs = replayed
    ? Math.min(input.sentAtMonotonicMs, input.firstSentAtMonotonicMs ?? input.sentAtMonotonicMs)
    : input.sentAtMonotonicMs;
  const ttlMs = Math.min(input.ttlMs, view.ttlMs);
  return {
    leaseId: view.leaseId,
    fencingToken: view.fencingToken,
    deadlineMs: view.deadlineMs,
    holderSecret,
    view,
    sentAtMonotonicMs,
    ttlMs,
    localDeadlineMonotonicMs: localDeadlineMs(sentAtMonotonicMs, ttlMs),
    replayed,
  };
};

/**
 * What an acquire answered, as a handle the holder can use: a replay that did not hand
 * the secret back is someone else's lease, and a replay of an ended lease is no lease.
 */
export const grantedLease = (
  result: z.infer<typeof AcquireResultV1>,
  holderSecret: string,
  sentAtMonotonicMs: number,
  ttlMs: number,
  firstSentAtMonotonicMs?: number,
): Lease => {
  const { lease: view, replayed } = result;
  if (result.holderSecret === undefined || result.holderSecret !== holderSecret) {
    throw new LeaseError(
      'FORBIDDEN',
      `lease ${view.leaseId} was granted to this idempotency key under another holder secret`,
      { details: { leaseId: view.leaseId, replayed } },
    );
  }
  if (view.status !== 'live') {
    throw new LeaseError(
      view.status === 'released' ? 'LEASE_RELEASED' : 'LEASE_REVOKED',
      `lease ${view.leaseId} granted to this idempotency key has ended (${view.status})`,
      { details: { leaseId: view.leaseId, replayed } },
    );
  }
  return leaseHandle({
    view,
    holderSecret,
    sentAtMonotonicMs,
    ttlMs,
    replayed,
    ...(firstSentAtMonotonicMs === undefined ? {} : { firstSentAtMonotonicMs }),
  });
};

const invalidRequest = (subject: string, error: z.ZodError) =>
  new LeaseError('INVALID_REQUEST', `request for ${subject}: ${error.issues[0]?.message ?? 'invalid'}`, {
    details: { issues: error.issues },
  });

/** A client of the gateway's request/reply verbs over NATS. */
export const createLeaseClient = (options: LeaseClientOptions): LeaseClient => {
  const { nc } = options;
  const clock = options.clock ?? systemClock;
  const timeoutMs = checkTimeout(options.timeoutMs ?? REQUEST_TIMEOUT_DEFAULT_MS, 'timeoutMs');

  /** Sends a body already validated, decodes the reply. Rejects only with a LeaseError. */
  const exchange = async <R extends z.ZodType>(
    subject: string,
    body: unknown,
    resultSchema: R,
    callTimeoutMs: number,
  ): Promise<z.infer<R>> => {
    let data: Uint8Array;
    try {
      const reply = await nc.request(subject, Buffer.from(JSON.stringify(body)), { timeout: callTimeoutMs });
      data = reply.data;
    } catch (cause) {
      throw toLeaseError(cause, subject);
    }
    const decoded = decodeReply(subject, resultSchema, data);
    if (!decoded.ok) throw decoded.error;
    return decoded.result;
  };

  /** One round trip: validate locally, send, decode. Rejects only with a LeaseError. */
  const roundTrip = async <R extends z.ZodType>(
    subject: string,
    requestSchema: z.ZodType,
    request: unknown,
    resultSchema: R,
    callTimeoutMs: number,
  ): Promise<z.infer<R>> => {
    const checked = compiled(requestSchema).safeParse(request);
    if (!checked.success) throw invalidRequest(subject, checked.error);
    return exchange(subject, checked.data, resultSchema, callTimeoutMs);
  };

  const renewBatched = createRenewBatcher({
    batchMax: Math.min(Math.max(1, options.renewBatchMax ?? RENEW_BATCH_DEFAULT), RENEW_BATCH_MAX),
    // Each renewal was validated when renew() queued it: sent as it is.
    one: async (request, callTimeoutMs) =>
      (await exchange(COMMAND_SUBJECTS.renew, request, LeaseResultV1, callTimeoutMs)).lease,
    many: async (renewals, callTimeoutMs) => {
      const subject = COMMAND_SUBJECTS.renewMany;
      const { results } = await exchange(subject, { renewals }, RenewManyReply, callTimeoutMs);
      if (results.length !== renewals.length)
        throw invalidReply(subject, `${results.length} results for ${renewals.length} renewals`);
      return results.map((item) =>
        item.ok ? { ok: true, lease: item.lease } : { ok: false, error: leaseErrorFromJson(item.error) },
      );
    },
  });

  const timeoutOf = (opts?: CallOptions) =>
    opts?.timeoutMs === undefined ? timeoutMs : checkTimeout(opts.timeoutMs, 'timeoutMs');

  return {
    clock,
    timeoutMs,

    async acquire(request, opts) {
      const holderSecret = request.holderSecret ?? newHolderSecret();
      // The gateway holds the request while it waits for slots: the wait is not a timeout.
      const waitMs = Math.min(Math.max(request.waitMs ?? 0, 0), ACQUIRE_WAIT_MAX_MS);
      const sentAtMonotonicMs = clock.monotonicMs();
      const result = await roundTrip(
        COMMAND_SUBJECTS.acquire,
        AcquireRequestV1,
        { ...request, holderSecret },
        AcquireResultV1,
        timeoutOf(opts) + waitMs,
      );
      return grantedLease(
        result,
        holderSecret,
        // A grant decided after a wait in the gateway's queue runs from then, not from the send.
        sentAtMonotonicMs + (result.waitedMs ?? 0),
        request.ttlMs,
        opts?.firstSentAtMonotonicMs,
      );
    },

    async cancel(waiting, opts) {
      await roundTrip(
        COMMAND_SUBJECTS.cancel,
        CancelRequestV1,
        { leaseId: waiting.leaseId, holderSecret: waiting.holderSecret },
        CancelResultV1,
        timeoutOf(opts),
      );
    },

    async renew(lease, opts) {
      const ttlMs = opts?.ttlMs ?? lease.ttlMs;
      // Read before the renewal is queued: the local deadline runs from before the send.
      const sentAtMonotonicMs = clock.monotonicMs();
      const request = compiled(RenewRequestV1).safeParse({
        leaseId: lease.leaseId,
        holderSecret: lease.holderSecret,
        ...(opts?.ttlMs === undefined ? {} : { ttlMs: opts.ttlMs }),
      });
      if (!request.success) throw invalidRequest(COMMAND_SUBJECTS.renew, request.error);
      const view = await renewBatched(request.data, timeoutOf(opts)).catch((cause: unknown) => {
        throw toLeaseError(cause, COMMAND_SUBJECTS.renew);
      });
      return leaseHandle({ view, holderSecret: lease.holderSecret, sentAtMonotonicMs, ttlMs });
    },

    async release(lease, opts) {
      const result = await roundTrip(
        COMMAND_SUBJECTS.release,
        ReleaseRequestV1,
        {
          leaseId: lease.leaseId,
          holderSecret: lease.holderSecret,
          ...(opts?.detail === undefined ? {} : { detail: opts.detail }),
        },
        LeaseResultV1,
        timeoutOf(opts),
      );
      return result.lease;
    },

    async revoke(request, opts) {
      const result = await roundTrip(
        COMMAND_SUBJECTS.revoke,
        RevokeRequestV1,
        request,
        LeaseResultV1,
        timeoutOf(opts),
      );
      return result.lease;
    },

    async get(request, opts) {
      const result = await roundTrip(
        COMMAND_SUBJECTS.get,
        GetRequestV1,
        request,
        LeaseResultV1,
        timeoutOf(opts),
      );
      return result.lease;
    },

    list(request = {}, opts) {
      return roundTrip(COMMAND_SUBJECTS.list, ListRequestV1, request, LeaseListResultV1, timeoutOf(opts));
    },

    async defineLimit(request, opts) {
      const result = await roundTrip(
        COMMAND_SUBJECTS.defineLimit,
        DefineLimitRequestV1,
        request,
        LimitResultV1,
        timeoutOf(opts),
      );
      return result.limit;
    },

    async removeLimit(request, opts) {
      const result = await roundTrip(
        COMMAND_SUBJECTS.removeLimit,
        RemoveLimitRequestV1,
        request,
        LimitResultV1,
        timeoutOf(opts),
      );
      return result.limit;
    },

    listLimits(opts) {
      return roundTrip(
        COMMAND_SUBJECTS.listLimits,
        ListLimitsRequestV1,
        {},
        LimitListResultV1,
        timeoutOf(opts),
      );
    },

    setRequesterLimit(request, opts) {
      return roundTrip(
        COMMAND_SUBJECTS.setRequesterLimit,
        SetRequesterLimitRequestV1,
        request,
        RequesterLimitResultV1,
        timeoutOf(opts),
      );
    },
  };
};
