import { z } from 'zod';

/** Lease ids become a subject token, so they exclude '.', '*', '>' and whitespace. */
export const LeaseId = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/, 'a lease id is 1-64 of [A-Za-z0-9_-]');
/** Names of limits, requesters and holders never reach a subject; they may carry '.', ':', '/', '@'. */
export const Name = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9_.:/@-]{0,127}$/, 'a name is 1-128 of [A-Za-z0-9_.:/@-]');
export const LimitName = Name;
export const RequesterId = Name;
export const HolderId = Name;
export const IdempotencyKey = z.string().min(1).max(128);
export const Millis = z.number().int().nonnegative();
export const PositiveMillis = z.number().int().positive();
/**
 * Free-form JSON the caller attaches to a lease; its serialized size is capped by policy.
 * Values are `unknown`, not `z.json()`: whatever reaches a schema was parsed from JSON, so
 * it is JSON already, and `z.json()` is a reference cycle that keeps every schema holding
 * it off zod's compiled fast path (see `compiled` in ../codec.ts).
 */
export const Metadata = z.record(z.string(), z.unknown());

export const SLOTS_PER_LIMIT_MAX = 1_000_000;
export const LIMITS_PER_LEASE_MAX = 16;

export const SlotClaim = z.object({
  limit: LimitName,
  count: z.number().int().min(1).max(SLOTS_PER_LIMIT_MAX),
});
export type SlotClaim = z.infer<typeof SlotClaim>;

export const SlotClaims = z
  .array(SlotClaim)
  .min(1)
  .max(LIMITS_PER_LEASE_MAX)
  .refine((claims) => new Set(claims.map((c) => c.limit)).size === claims.length, 'each limit appears once');

export const RevokeReason = z.enum(['expired', 'admin']);
export type RevokeReason = z.infer<typeof RevokeReason>;
