import { z } from 'zod';
import { ERROR_CODES, type LeaseErrorCode } from '../errors.js';
import { Metadata, RevokeReason, SlotClaim } from './common.js';

/**
 * Version 1 of what the gateway answers. Every reply is `{ ok: true, result }` or
 * `{ ok: false, error }`; docs/protocol.md shows each of them, and a test checks it does.
 */
export const LeaseViewV1 = z.object({
  leaseId: z.string(),
  requester: z.string(),
  holder: z.string().optional(),
  slots: z.array(SlotClaim),
  status: z.enum(['live', 'released', 'revoked']),
  ttlMs: z.number(),
  grantedAtMs: z.number(),
  deadlineMs: z.number(),
  fencingToken: z.number(),
  renewals: z.number(),
  grantSeq: z.number(),
  lastSubjectSeq: z.number(),
  endedAtMs: z.number().optional(),
  revokeReason: RevokeReason.optional(),
  metadata: Metadata.optional(),
});
export type LeaseView = z.infer<typeof LeaseViewV1>;

export const LimitViewV1 = z.object({
  limit: z.string(),
  slotsMax: z.number(),
  used: z.number(),
  free: z.number(),
});
export type LimitView = z.infer<typeof LimitViewV1>;

export const AcquireResultV1 = z.object({
  lease: LeaseViewV1,
  /** Present on a new grant, and on a replay that presented the same secret. */
  holderSecret: z.string().optional(),
  /** True when the idempotency key had already been granted: this is the original lease. */
  replayed: z.boolean(),
  /**
   * How long the gateway held the request in the queue before deciding the grant. A holder
   * measures its local deadline from its send time plus this, never from when the reply came.
   */
  waitedMs: z.number().int().nonnegative().optional(),
});
export const CancelResultV1 = z.object({ leaseId: z.string(), cancelled: z.literal(true) });
export const LeaseResultV1 = z.object({ lease: LeaseViewV1 });
export const LeaseListResultV1 = z.object({
  leases: z.array(LeaseViewV1),
  total: z.number(),
  truncated: z.boolean(),
});
export const LimitResultV1 = z.object({ limit: LimitViewV1.nullable() });
export const LimitListResultV1 = z.object({
  limits: z.array(LimitViewV1),
  defaultLeasesPerRequester: z.number(),
  requesterLimits: z.record(z.string(), z.number()),
});
export const RequesterLimitResultV1 = z.object({ requester: z.string(), leasesMax: z.number() });

const codes = Object.keys(ERROR_CODES) as [LeaseErrorCode, ...LeaseErrorCode[]];
const ErrorV1 = z.object({
  code: z.enum(codes),
  retryable: z.boolean(),
  message: z.string(),
  details: z.record(z.string(), z.unknown()).optional(),
});

export const ErrorReplyV1 = z.object({ ok: z.literal(false), error: ErrorV1 });

/** One answer per renewal, in the request's order: the renewed lease, or that renewal's error. */
export const RenewManyResultV1 = z.object({
  results: z.array(
    z.discriminatedUnion('ok', [
      z.object({ ok: z.literal(true), lease: LeaseViewV1 }),
      z.object({ ok: z.literal(false), error: ErrorV1 }),
    ]),
  ),
});

export const okReply = <T extends z.ZodType>(result: T) => z.object({ ok: z.literal(true), result });
