/**
 * @lease/client: the holder's side of the lease coordinator. `createLeaseClient` speaks
 * the gateway's request/reply verbs over NATS; `withLease` holds a lease for the length of
 * a piece of work and tells it, through an AbortSignal, the moment the lease is lost.
 */
export {
  ACQUIRE_WAIT_MAX_MS,
  type AcquireCallOptions,
  type AcquireRequest,
  type CallOptions,
  createLeaseClient,
  type DefineLimitRequest,
  type GetRequest,
  type Lease,
  type LeaseClient,
  type LeaseClientOptions,
  type LeaseList,
  type LimitList,
  type ListRequest,
  newHolderSecret,
  REQUEST_TIMEOUT_DEFAULT_MS,
  REQUEST_TIMEOUT_MAX_MS,
  type ReleaseCallOptions,
  type RemoveLimitRequest,
  type RenewCallOptions,
  type RequesterLimit,
  type RevokeRequest,
  type SetRequesterLimitRequest,
  systemClock,
} from './client.js';
export { type HeldLease, type HoldingClient, type HoldOptions, holdLease } from './hold.js';
export {
  backoffMs,
  classifyRenewalError,
  localDeadlineLoss,
  type NextRenewal,
  nextRenewal,
  RETRY_DELAY_MAX_MS,
  RETRY_FIRST_DELAY_MS,
  RETRY_FLOOR_MS,
  RETRY_REMAINING_FRACTION,
  type RenewalFailure,
  type RenewalInput,
} from './renewal.js';
export {
  ACQUIRE_ATTEMPTS_DEFAULT,
  ACQUIRE_ATTEMPTS_LIMIT,
  ACQUIRE_RETRY_WITHIN_DEFAULT_MS,
  ACQUIRE_RETRY_WITHIN_LIMIT_MS,
  type LeaseHolderClient,
  RELEASE_ATTEMPTS_MAX,
  type WithLeaseOptions,
  withLease,
} from './with-lease.js';
