import { isAdmissionEvent, type LeaseEvent } from './lease/events.js';

/**
 * The one place subjects and the stream's configuration are named (ADR 0001).
 *
 *   lease.events.admission          grants, limit and requester-limit changes: one
 *                                   serialization point for everything that decides
 *                                   what may be granted
 *   lease.events.lease.<leaseId>    renewals, releases, revocations of one lease
 *   lease.cmd.<verb>                request/reply commands to the gateway (queue group)
 */
export const STREAM_NAME = 'LEASES';
export const EVENTS_PREFIX = 'lease.events';
export const EVENTS_WILDCARD = `${EVENTS_PREFIX}.>`;
export const ADMISSION_SUBJECT = `${EVENTS_PREFIX}.admission`;
export const LEASE_SUBJECT_PREFIX = `${EVENTS_PREFIX}.lease`;

export const leaseSubject = (leaseId: string): string => `${LEASE_SUBJECT_PREFIX}.${leaseId}`;

/** The lease id of a per-lease subject, or undefined for any other subject. */
export const leaseIdOfSubject = (subject: string): string | undefined =>
  subject.startsWith(`${LEASE_SUBJECT_PREFIX}.`) ? subject.slice(LEASE_SUBJECT_PREFIX.length + 1) : undefined;

export const subjectFor = (event: LeaseEvent): string =>
  isAdmissionEvent(event) ? ADMISSION_SUBJECT : leaseSubject((event as { leaseId: string }).leaseId);

export const COMMAND_PREFIX = 'lease.cmd';
export const COMMAND_SUBJECTS = {
  acquire: `${COMMAND_PREFIX}.acquire`,
  cancel: `${COMMAND_PREFIX}.cancel`,
  renew: `${COMMAND_PREFIX}.renew`,
  renewMany: `${COMMAND_PREFIX}.renew-many`,
  release: `${COMMAND_PREFIX}.release`,
  revoke: `${COMMAND_PREFIX}.revoke`,
  get: `${COMMAND_PREFIX}.get`,
  list: `${COMMAND_PREFIX}.list`,
  defineLimit: `${COMMAND_PREFIX}.limits.define`,
  removeLimit: `${COMMAND_PREFIX}.limits.remove`,
  listLimits: `${COMMAND_PREFIX}.limits.list`,
  setRequesterLimit: `${COMMAND_PREFIX}.requesters.limit`,
} as const;

/** Each repossessor replica answers its counters here (request/reply, no queue group). */
export const REPOSSESSOR_STATUS_SUBJECT = 'lease.repossessor.status';

/** Larger than any one command's message: a group commit is bounded to fit under it. */
export const MESSAGE_BYTES_MAX = 1024 * 1024;
/** JetStream's duplicate window for Nats-Msg-Id: a retried publish within it is stored once. */
export const DUPLICATE_WINDOW_MS = 2 * 60 * 1000;

/**
 * The lease log's stream. Plain data (no client types), so the pure core can own it; the
 * bus passes it to JetStream and reads it back to check the server kept every field.
 */
export const leaseStreamConfig = (options: { replicas?: number } = {}) => ({
  name: STREAM_NAME,
  subjects: [EVENTS_WILDCARD],
  storage: 'file' as const,
  retention: 'limits' as const,
  discard: 'old' as const,
  num_replicas: options.replicas ?? 1,
  max_msg_size: MESSAGE_BYTES_MAX,
  // nanoseconds, as the JetStream API takes them
  duplicate_window: DUPLICATE_WINDOW_MS * 1_000_000,
  allow_direct: true,
  deny_delete: true,
  deny_purge: false,
});

/** Object store bucket holding projection snapshots; the object is replaced by each newer snapshot. */
export const SNAPSHOT_BUCKET = 'LEASE_SNAPSHOTS';
export const SNAPSHOT_OBJECT = 'projection-v1';
