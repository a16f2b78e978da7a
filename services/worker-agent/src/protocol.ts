import {
  ERROR_CODES,
  type LeaseErrorCode,
  Metadata,
  PositiveMillis,
  RequesterId,
  SlotClaims,
} from '@lease/events';
import { z } from 'zod';

/**
 * The worker-agent's NATS protocol, version 1 (docs/worker-agent.md). Every subject carries
 * the worker id, so one agent answers for one host and a requester picks the host:
 *
 *   lease.agent.<workerId>.run        request/reply: run a workload under a lease
 *   lease.agent.<workerId>.drain      request/reply: stop (or resume) accepting workloads
 *   lease.agent.<workerId>.status     request/reply: what runs, whether draining
 *   lease.agent.<workerId>.outcome    published: how each workload ended
 *   lease.agent.<workerId>.heartbeat  published: presence, every AGENT_HEARTBEAT_MS
 *
 * and the agent is a NATS micro service `lease-worker-agent` ($SRV.PING/INFO/STATS) whose
 * metadata names the worker, its host and its version.
 */

export const AGENT_SERVICE_NAME = 'lease-worker-agent';
export const AGENT_VERSION = '0.1.0';
export const AGENT_PREFIX = 'lease.agent';

/** A worker id is a subject token: no '.', '*', '>' or whitespace. */
export const WorkerId = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/, 'letters, digits, _ and - only');

export const agentSubjects = (workerId: string) => ({
  run: `${AGENT_PREFIX}.${workerId}.run`,
  drain: `${AGENT_PREFIX}.${workerId}.drain`,
  status: `${AGENT_PREFIX}.${workerId}.status`,
  outcome: `${AGENT_PREFIX}.${workerId}.outcome`,
  heartbeat: `${AGENT_PREFIX}.${workerId}.heartbeat`,
});

/** The longest argument and the most arguments a request may carry. */
export const ARG_BYTES_MAX = 4_096;
export const ARGS_MAX = 256;

export const RunRequestV1 = z
  .strictObject({
    /** A job defined in the agent's jobs file ... */
    job: z.string().min(1).max(128).optional(),
    /** ... or a command on its allowlist (an absolute path, exactly as listed). */
    command: z.string().min(1).max(ARG_BYTES_MAX).optional(),
    /** Appended to the job's own arguments; each must be allowed by the job. Never seen by a shell. */
    args: z.array(z.string().max(ARG_BYTES_MAX)).max(ARGS_MAX).default([]),
    requester: RequesterId,
    slots: SlotClaims,
    /** The TTL of every renewal; the agent's AGENT_TTL_MS when absent. */
    ttlMs: PositiveMillis.optional(),
    /** The TTL of the grant, for a slow start; the agent's AGENT_INITIAL_TTL_MS when absent (never below ttlMs). */
    initialTtlMs: PositiveMillis.optional(),
    /** Wait this long for free slots (the gateway's waiting acquire); the reply waits as long. */
    waitMs: z.number().int().nonnegative().optional(),
    /** Makes a retried request start the workload once: the same key answers the same run. */
    idempotencyKey: z
      .string()
      .regex(/^[A-Za-z0-9_-]{1,64}$/)
      .optional(),
    metadata: Metadata.optional(),
  })
  .refine((request) => (request.job === undefined) !== (request.command === undefined), {
    message: 'exactly one of job and command',
  });
export type RunRequest = z.infer<typeof RunRequestV1>;

export const DrainRequestV1 = z.strictObject({ draining: z.boolean() });

/** The agent's own refusals, with the same shape and flags as the gateway's codes. */
export const AGENT_ERROR_CODES = {
  INVALID_REQUEST: { retryable: false, meaning: 'The request is not JSON or does not match RunRequestV1.' },
  UNKNOWN_JOB: { retryable: false, meaning: "No job of that name is in the agent's jobs file." },
  COMMAND_NOT_ALLOWED: { retryable: false, meaning: "The command is not on the agent's allowlist." },
  ARGS_NOT_ALLOWED: { retryable: false, meaning: 'An argument is not allowed by the job.' },
  DRAINING: {
    retryable: true,
    meaning: 'The agent is draining: it runs no new workloads (send it elsewhere).',
  },
  AGENT_FULL: { retryable: true, meaning: 'The agent runs AGENT_WORKLOADS_MAX workloads already.' },
  AGENT_STOPPING: { retryable: true, meaning: 'The agent is shutting down.' },
  SPAWN_FAILED: {
    retryable: false,
    meaning: 'The workload could not be started (no such file, no permission).',
  },
  INTERNAL: { retryable: true, meaning: 'The agent failed unexpectedly (see its log).' },
} as const;
export type AgentErrorCode = keyof typeof AGENT_ERROR_CODES;

export interface AgentErrorBody {
  readonly code: AgentErrorCode | LeaseErrorCode;
  readonly retryable: boolean;
  readonly message: string;
}

export const agentError = (code: AgentErrorCode, message: string): AgentErrorBody => ({
  code,
  retryable: AGENT_ERROR_CODES[code].retryable,
  message,
});

export const leaseErrorBody = (code: LeaseErrorCode, message: string): AgentErrorBody => ({
  code,
  retryable: ERROR_CODES[code].retryable,
  message,
});

export interface RunStarted {
  readonly runId: string;
  readonly leaseId: string;
  readonly fencingToken: number;
  readonly pid: number;
  /** True when the idempotency key named a run this agent already started. */
  readonly replayed: boolean;
}

/** How a run ended. */
export type OutcomeKind =
  /** The workload exited by itself; `exitCode` is its code. */
  | 'exited'
  /** The workload was ended by a signal nobody in the agent sent. */
  | 'signalled'
  /** "terminated: lease lost": revoked, expired, or past its local deadline; its group was killed. */
  | 'lease-lost'
  /** The agent stopped (SIGTERM) and ended the workload. */
  | 'agent-stopped'
  /** Found by the start-up reconcile: the workload was not running any more (the agent had died). */
  | 'abandoned';

export interface OutcomeV1 {
  readonly v: 1;
  readonly workerId: string;
  readonly runId: string;
  readonly leaseId: string;
  readonly job: string | null;
  readonly requester: string;
  readonly outcome: OutcomeKind;
  readonly exitCode: number | null;
  readonly signal: string | null;
  /** Human-readable, e.g. "terminated: lease lost (LEASE_REVOKED)". */
  readonly reason: string;
  /** The lease error that ended the lease, when it was lost. */
  readonly lostCode: string | null;
  /** SIGKILL was needed after the grace. */
  readonly killed: boolean;
  /** The lease was released by the agent (false when lost, or the release failed). */
  readonly released: boolean;
  readonly startedAtMs: number | null;
  readonly endedAtMs: number;
  /** Wall clock when the loss was decided (revocation heard, final answer, local deadline). */
  readonly lostAtMs: number | null;
  /** Wall clock when the last process of the workload's group was seen gone. */
  readonly goneAtMs: number | null;
}
