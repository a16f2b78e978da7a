import { z } from 'zod';
import {
  HolderId,
  IdempotencyKey,
  LeaseId,
  LimitName,
  Metadata,
  Millis,
  Name,
  PositiveMillis,
  RequesterId,
  RevokeReason,
  SlotClaims,
} from './common.js';

/**
 * Version 1 of every event. A published version never changes: a new field or meaning
 * is a new version plus an upcaster in ../codec.ts. Every event carries `atMs`, the
 * decider's clock when it was decided, so replay never reads a clock.
 */
const base = { v: z.literal(1), atMs: Millis, actor: Name.optional() };

export const LimitDefinedV1 = z.object({
  type: z.literal('LimitDefined'),
  ...base,
  limit: LimitName,
  slotsMax: z.number().int().min(1),
});

export const LimitResizedV1 = z.object({
  type: z.literal('LimitResized'),
  ...base,
  limit: LimitName,
  slotsMax: z.number().int().min(1),
  previousSlotsMax: z.number().int().min(1),
});

export const LimitRemovedV1 = z.object({ type: z.literal('LimitRemoved'), ...base, limit: LimitName });

/** `requester: '*'` sets the default for every requester without a limit of its own. */
export const RequesterLimitSetV1 = z.object({
  type: z.literal('RequesterLimitSet'),
  ...base,
  requester: z.union([RequesterId, z.literal('*')]),
  leasesMax: z.number().int().min(1),
});

export const GrantV1 = z.object({
  leaseId: LeaseId,
  requester: RequesterId,
  holder: HolderId.optional(),
  slots: SlotClaims,
  ttlMs: PositiveMillis,
  deadlineMs: Millis,
  /** Grows by one with every grant of the log: a resource can refuse an older holder. */
  fencingToken: z.number().int().positive(),
  /** sha256 of the holder secret, hex. The secret itself is never written to the log. */
  secretHash: z.string().regex(/^[0-9a-f]{64}$/),
  idempotencyKey: IdempotencyKey.optional(),
  metadata: Metadata.optional(),
});

/** One event for every grant decided in one pass (group commit): one message, one append. */
export const LeasesGrantedV1 = z.object({
  type: z.literal('LeasesGranted'),
  ...base,
  grants: z.array(GrantV1).min(1),
});

export const LeaseRenewedV1 = z.object({
  type: z.literal('LeaseRenewed'),
  ...base,
  leaseId: LeaseId,
  ttlMs: PositiveMillis,
  deadlineMs: Millis,
});

export const LeaseReleasedV1 = z.object({
  type: z.literal('LeaseReleased'),
  ...base,
  leaseId: LeaseId,
  detail: z.string().max(512).optional(),
});

export const LeaseRevokedV1 = z.object({
  type: z.literal('LeaseRevoked'),
  ...base,
  leaseId: LeaseId,
  reason: RevokeReason,
  /** The deadline the revocation enforced, for the audit ("deadline 02:14:03.120"). */
  deadlineMs: Millis,
  /** The last sequence on the lease's subject that the revoker had folded (0: none after the grant). */
  decidedAgainstSeq: z.number().int().nonnegative(),
  detail: z.string().max(512).optional(),
});

/** An acquire waiting for slots, in the order of the admission log (first come, first served per limit). */
export const WaiterV1 = z.object({
  /** The id the lease will have when granted; also what a cancellation names. */
  leaseId: LeaseId,
  requester: RequesterId,
  slots: SlotClaims,
  secretHash: z.string().regex(/^[0-9a-f]{64}$/),
  /** After this the waiter no longer holds its place, even if nobody appended its end. */
  expiresAtMs: Millis,
  /** The gateway replica holding the waiting request. */
  owner: Name.optional(),
});

export const AcquiresQueuedV1 = z.object({
  type: z.literal('AcquiresQueued'),
  ...base,
  waiters: z.array(WaiterV1).min(1),
});

export const WaitEndedV1 = z.object({
  type: z.literal('WaitEnded'),
  ...base,
  leaseId: LeaseId,
  reason: z.enum(['cancelled', 'timed-out', 'refused']),
});

export const LeaseEventV1 = z.discriminatedUnion('type', [
  LimitDefinedV1,
  LimitResizedV1,
  LimitRemovedV1,
  RequesterLimitSetV1,
  LeasesGrantedV1,
  LeaseRenewedV1,
  LeaseReleasedV1,
  LeaseRevokedV1,
  AcquiresQueuedV1,
  WaitEndedV1,
]);
