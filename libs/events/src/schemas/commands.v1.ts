import { z } from 'zod';
import {
  HolderId,
  IdempotencyKey,
  LeaseId,
  LimitName,
  Metadata,
  Name,
  PositiveMillis,
  RequesterId,
  SlotClaims,
} from './common.js';

/**
 * Version 1 of the requests a client sends. Unknown fields are refused (strict), so a
 * typo is an INVALID_REQUEST instead of a silently ignored option.
 */
const HolderSecret = z.string().min(16).max(128);

export const AcquireRequestV1 = z.strictObject({
  requester: RequesterId,
  slots: SlotClaims,
  ttlMs: PositiveMillis,
  leaseId: LeaseId.optional(),
  holder: HolderId.optional(),
  idempotencyKey: IdempotencyKey.optional(),
  /** Chosen by the client so that a retry with the same idempotency key can keep using it. */
  holderSecret: HolderSecret.optional(),
  metadata: Metadata.optional(),
  /** How long to wait for free slots; 0 or absent with noWait answers at once. */
  waitMs: z.number().int().nonnegative().optional(),
  noWait: z.boolean().optional(),
});

export const RenewRequestV1 = z.strictObject({
  leaseId: LeaseId,
  holderSecret: HolderSecret,
  ttlMs: PositiveMillis.optional(),
});

/** Renewals one `renew-many` request may carry. */
export const RENEW_BATCH_MAX = 256;

/**
 * Several renewals in one request (a holder with many leases, or an SDK coalescing its
 * callers): each is decided and appended on its own, as if sent alone.
 */
export const RenewManyRequestV1 = z.strictObject({
  renewals: z
    .array(RenewRequestV1)
    .min(1)
    .max(RENEW_BATCH_MAX)
    .refine(
      (renewals) => new Set(renewals.map((r) => r.leaseId)).size === renewals.length,
      'each lease appears once',
    ),
});

export const ReleaseRequestV1 = z.strictObject({
  leaseId: LeaseId,
  holderSecret: HolderSecret,
  detail: z.string().max(512).optional(),
});

export const RevokeRequestV1 = z.strictObject({
  leaseId: LeaseId,
  reason: z.literal('admin'),
  actor: Name.optional(),
  detail: z.string().max(512).optional(),
});

export const DefineLimitRequestV1 = z.strictObject({
  limit: LimitName,
  slotsMax: z.number().int().min(1).max(1_000_000),
  actor: Name.optional(),
});

export const RemoveLimitRequestV1 = z.strictObject({ limit: LimitName, actor: Name.optional() });

export const SetRequesterLimitRequestV1 = z.strictObject({
  requester: z.union([RequesterId, z.literal('*')]),
  leasesMax: z.number().int().min(1).max(1_000_000),
  actor: Name.optional(),
});

/** Cancels an acquire that is waiting for slots: its holder secret proves it is the caller's. */
export const CancelRequestV1 = z.strictObject({ leaseId: LeaseId, holderSecret: HolderSecret });

export const GetRequestV1 = z.strictObject({ leaseId: LeaseId });

export const LIST_LEASES_MAX = 1_000;
export const ListRequestV1 = z.strictObject({
  requester: RequesterId.optional(),
  limit: LimitName.optional(),
  holder: HolderId.optional(),
  /** Ended leases the projection still keeps are included when true. */
  includeEnded: z.boolean().optional(),
  max: z.number().int().min(1).max(LIST_LEASES_MAX).optional(),
});

export const ListLimitsRequestV1 = z.strictObject({});
