import { holdLease, type Lease, type LeaseClient, newHolderSecret } from '@lease/client';
import {
  decodeEvent,
  ERROR_CODES,
  isLeaseError,
  LeaseError,
  leaseSubject,
  type SlotClaim,
} from '@lease/events';
import type { NatsConnection, Subscription } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import type { ResolvedWorkload } from './jobs.js';
import { procStat } from './process-group.js';
import {
  type AgentErrorBody,
  agentError,
  leaseErrorBody,
  type OutcomeKind,
  type OutcomeV1,
  type RunStarted,
} from './protocol.js';
import type { RunRecord, StateDir } from './state.js';
import type { ExitReport, SpawnedWorkload, Watchdog } from './watchdog-client.js';
import type { OutputSpec } from './watchdog-protocol.js';

/**
 * One workload under one lease, the same for the daemon and the one-shot mode:
 * record -> acquire -> hold -> spawn (through the watchdog) -> wait for the whole group to
 * end -> release -> outcome. The lease is lost when a renewal is answered with a final
 * code, when its local deadline passes without a confirmed renewal, or the moment the
 * agent hears the lease's revocation event; then the watchdog ends the workload's group.
 */

/** Acquire attempts on NOT_READY, UNAVAILABLE and STALE_VIEW (a gateway starting up), with one key and secret. */
export const ACQUIRE_ATTEMPTS_MAX = 5;
/** No acquire attempt starts later than this after the first. */
export const ACQUIRE_RETRY_WITHIN_MS = 10_000;
/** Release attempts on retryable errors once the workload is gone. */
export const RELEASE_ATTEMPTS_MAX = 3;
const RETRY_DELAY_MS = [100, 200, 400, 800, 1_600] as const;

/** Codes an acquire is retried on; capacity codes are not: waiting is the gateway's job (waitMs). */
const ACQUIRE_RETRY_CODES = new Set(['NOT_READY', 'UNAVAILABLE', 'STALE_VIEW']);

export interface SuperviseDeps {
  readonly client: LeaseClient;
  /** Used to hear the lease's revocation event as it is appended. */
  readonly nc: Pick<NatsConnection, 'subscribe'>;
  readonly watchdog: () => Promise<Watchdog>;
  /** Where lease ids and secrets are kept for a restarted agent; none in a one-shot run without one. */
  readonly state: StateDir | undefined;
  readonly logger: Logger;
  readonly workerId: string;
  /** SIGKILL follows SIGTERM after this long. */
  readonly graceMs: number;
}

export interface RunSpec {
  readonly runId: string;
  readonly requester: string;
  readonly slots: readonly SlotClaim[];
  /** TTL of every renewal. */
  readonly ttlMs: number;
  /** TTL of the grant (a slow start's first stretch); at least ttlMs. */
  readonly initialTtlMs: number;
  readonly waitMs?: number;
  readonly idempotencyKey?: string;
  readonly metadata?: Record<string, unknown>;
  readonly workload: ResolvedWorkload;
  readonly output: OutputSpec;
}

export type StartResult = { ok: true; started: RunStarted } | { ok: false; error: AgentErrorBody };

export interface Run {
  readonly runId: string;
  readonly leaseId: string;
  readonly spec: RunSpec;
  /** Settles once the workload runs, or with why it does not. */
  readonly started: Promise<StartResult>;
  /** How it ended; undefined when it never started. Never rejects. */
  readonly outcome: Promise<OutcomeV1 | undefined>;
  /** Ends the workload (agent shutdown); the lease is released once its group is gone. */
  stop(reason: string): void;
}

export const leaseIdOf = (runId: string) => `wa-${runId}`;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

const asLeaseError = (cause: unknown): LeaseError =>
  isLeaseError(cause)
    ? (cause as LeaseError)
    : new LeaseError('UNAVAILABLE', cause instanceof Error ? cause.message : String(cause), { cause });

const isAgentError = (value: unknown): value is AgentErrorBody =>
  typeof value === 'object' &&
  value !== null &&
  'code' in value &&
  'retryable' in value &&
  !(value instanceof Error);

const errorBody = (error: LeaseError): AgentErrorBody => leaseErrorBody(error.code, error.message);

const outcomeOf = (
  report: ExitReport,
  lost: LeaseError | undefined,
  stopReason: string | undefined,
): { outcome: OutcomeKind; reason: string } => {
  if (report.terminatedBy === 'watchdog-lost')
    return { outcome: 'agent-stopped', reason: 'terminated: the watchdog died' };
  if (report.terminatedBy !== null) {
    if (lost) {
      const local = lost.details?.local === true ? ', local deadline passed' : '';
      return { outcome: 'lease-lost', reason: `terminated: lease lost (${lost.code}${local})` };
    }
    if (report.terminatedBy === 'deadline')
      return { outcome: 'lease-lost', reason: 'terminated: lease lost (local deadline passed, watchdog)' };
    return { outcome: 'agent-stopped', reason: `terminated: ${stopReason ?? 'agent stopping'}` };
  }
  if (report.code !== null) return { outcome: 'exited', reason: `exited with code ${report.code}` };
  return { outcome: 'signalled', reason: `ended by ${report.signal ?? 'a signal'}` };
};

export const startRun = (deps: SuperviseDeps, spec: RunSpec): Run => {
  const { client, logger, state, workerId } = deps;
  const { runId } = spec;
  const leaseId = leaseIdOf(runId);
  const log = logger.child({ runId, leaseId, requester: spec.requester, job: spec.workload.job });
  const clock = client.clock;
  let stopReason: string | undefined;
  let stopHook: (() => void) | undefined;
  let resolveStarted!: (result: StartResult) => void;
  const started = new Promise<StartResult>((resolve) => {
    resolveStarted = resolve;
  });

  const record: RunRecord = {
    v: 1,
    runId,
    leaseId,
    holderSecret: newHolderSecret(),
    requester: spec.requester,
    job: spec.workload.job,
    phase: 'acquiring',
    createdAtMs: Date.now(),
    ...(spec.idempotencyKey ? { idempotencyKey: spec.idempotencyKey } : {}),
  };

  const acquire = async (): Promise<Lease> => {
    const firstSentAtMonotonicMs = clock.monotonicMs();
    for (let attempt = 1; ; attempt++) {
      try {
        return await client.acquire(
          {
            leaseId,
            holderSecret: record.holderSecret,
            idempotencyKey: runId,
            requester: spec.requester,
            holder: workerId,
            slots: [...spec.slots],
            ttlMs: spec.initialTtlMs,
            ...(spec.waitMs ? { waitMs: spec.waitMs } : { noWait: true }),
            metadata: { ...spec.metadata, workerAgent: { workerId, runId, job: spec.workload.job } },
          },
          { firstSentAtMonotonicMs },
        );
      } catch (cause) {
        const error = asLeaseError(cause);
        const delayMs = RETRY_DELAY_MS[attempt - 1] ?? 0;
        const retry =
          ACQUIRE_RETRY_CODES.has(error.code) &&
          attempt < ACQUIRE_ATTEMPTS_MAX &&
          clock.monotonicMs() + delayMs - firstSentAtMonotonicMs < ACQUIRE_RETRY_WITHIN_MS;
        if (!retry) throw error;
        await sleep(delayMs);
      }
    }
  };

  /** An acquire whose answer was lost may have been granted: release it, or leave the record to the reconcile. */
  const abandonAcquire = async (error: LeaseError) => {
    if (error.code === 'UNAVAILABLE') {
      const released = await client.release({ leaseId, holderSecret: record.holderSecret }).then(
        () => true,
        (cause: unknown) => asLeaseError(cause).code === 'UNKNOWN_LEASE',
      );
      if (!released) {
        log.warn('the acquire may have been granted and could not be released: left to the reconcile');
        return;
      }
    }
    await state?.removeRun(runId);
  };

  const releaseLease = async (lease: Lease, detail: string): Promise<boolean> => {
    for (let attempt = 1; ; attempt++) {
      try {
        await client.release(lease, { detail: detail.slice(0, 512) });
        return true;
      } catch (cause) {
        const error = asLeaseError(cause);
        const delayMs = RETRY_DELAY_MS[attempt - 1] ?? 0;
        const retry =
          ERROR_CODES[error.code].retryable &&
          attempt < RELEASE_ATTEMPTS_MAX &&
          clock.monotonicMs() + delayMs < lease.localDeadlineMonotonicMs;
        if (!retry) {
          log.warn({ code: error.code }, 'release failed: the lease ends at its deadline instead');
          return false;
        }
        await sleep(delayMs);
      }
    }
  };

  const run = async (): Promise<OutcomeV1 | undefined> => {
    let subscription: Subscription | undefined;
    let revoked: LeaseError | undefined;
    let onRevoked: ((reason: LeaseError) => void) | undefined;
    try {
      await state?.writeRun(record);
      // Subscribed before the acquire: a revocation can never slip between grant and subscription.
      subscription = deps.nc.subscribe(leaseSubject(leaseId), {
        callback: (error, msg) => {
          if (error) return;
          const decoded = decodeEvent(msg.data);
          if (!decoded.ok || decoded.event.type !== 'LeaseRevoked') return;
          const reason = new LeaseError(
            'LEASE_REVOKED',
            `lease ${leaseId} was revoked (${decoded.event.reason})`,
            { details: { leaseId, reason: decoded.event.reason, heard: 'event' } },
          );
          revoked ??= reason;
          onRevoked?.(reason);
        },
      });

      let lease: Lease;
      try {
        lease = await acquire();
      } catch (cause) {
        const error = asLeaseError(cause);
        log.info({ code: error.code }, 'not started: the lease was not granted');
        await abandonAcquire(error);
        resolveStarted({ ok: false, error: errorBody(error) });
        return undefined;
      }
      log.debug({ fencingToken: lease.fencingToken }, 'lease granted');

      const watchdog = await deps.watchdog();
      let lostAtMs: number | null = null;
      const held = holdLease(client, lease, {
        renewTtlMs: spec.ttlMs,
        onRenewed: (renewed) =>
          watchdog.deadline(runId, renewed.localDeadlineMonotonicMs - clock.monotonicMs()),
        onRenewalFailed: (error, attempt) =>
          log.warn({ code: error.code, attempt }, 'renewal failed: retrying until the local deadline'),
        onLost: (reason) => {
          lostAtMs = Date.now();
          log.warn(
            { code: reason.code, local: reason.details?.local === true },
            'lease lost: ending the workload',
          );
          watchdog.kill(runId, reason.code);
        },
      });
      onRevoked = (reason) => held.lose(reason);
      if (revoked) held.lose(revoked);
      stopHook = () => watchdog.kill(runId, stopReason ?? 'stop');

      let workload: SpawnedWorkload;
      const startedAtMs = Date.now();
      try {
        if (stopReason) throw agentError('AGENT_STOPPING', `not started: ${stopReason}`);
        const remainingMs = held.current().localDeadlineMonotonicMs - clock.monotonicMs();
        if (held.lost() || remainingMs <= 0)
          throw held.lost() ?? new Error('the lease is past its local deadline');
        workload = await watchdog.spawn({
          id: runId,
          command: spec.workload.command,
          args: spec.workload.args,
          env: {
            ...spec.workload.env,
            LEASE_ID: leaseId,
            LEASE_FENCING_TOKEN: String(lease.fencingToken),
            LEASE_WORKER_ID: workerId,
            LEASE_RUN_ID: runId,
          },
          ...(spec.workload.cwd ? { cwd: spec.workload.cwd } : {}),
          output: spec.output,
          remainingMs,
          graceMs: deps.graceMs,
        });
      } catch (cause) {
        const kept = await held.stop();
        if (kept) await releaseLease(kept, 'worker-agent: the workload could not be started');
        await state?.removeRun(runId);
        const error = isLeaseError(cause)
          ? errorBody(cause as LeaseError)
          : isAgentError(cause)
            ? cause
            : agentError('SPAWN_FAILED', (cause as Error).message);
        log.warn({ code: error.code }, `not started: ${error.message}`);
        resolveStarted({ ok: false, error });
        return undefined;
      }
      const { pid } = workload;
      const stat = procStat(pid);
      // If this write fails the 'acquiring' record stays: a restarted agent still releases the
      // lease; the group is the watchdog's to end.
      await state
        ?.writeRun({
          ...record,
          phase: 'running',
          pgid: pid,
          ...(stat ? { startTicks: stat.startTicks } : {}),
        })
        .catch((error: unknown) => log.error({ err: error }, 'could not record the running workload'));
      log.info({ pid, fencingToken: lease.fencingToken }, 'workload started');
      resolveStarted({
        ok: true,
        started: { runId, leaseId, fencingToken: lease.fencingToken, pid, replayed: false },
      });
      if (stopReason) stopHook();

      const report = await workload.exited;
      const kept = await held.stop();
      const lost = held.lost();
      const { outcome, reason } = outcomeOf(report, lost, stopReason);
      const released = kept ? await releaseLease(kept, `worker-agent ${workerId}: ${reason}`) : false;
      await state?.removeRun(runId);
      const result: OutcomeV1 = {
        v: 1,
        workerId,
        runId,
        leaseId,
        job: spec.workload.job,
        requester: spec.requester,
        outcome,
        exitCode: report.code,
        signal: report.signal,
        reason,
        lostCode: lost?.code ?? null,
        killed: report.killed,
        released,
        startedAtMs,
        endedAtMs: Date.now(),
        lostAtMs,
        goneAtMs: report.goneAtMs,
      };
      if (!report.gone) log.error({ pgid: pid }, 'the workload group survived SIGKILL');
      log.info({ outcome, exitCode: report.code, signal: report.signal, lostCode: result.lostCode }, reason);
      return result;
    } catch (error) {
      // Only the state dir can fail here (disk full, permissions): nothing may run without a record.
      log.error({ err: error }, 'run failed');
      resolveStarted({ ok: false, error: agentError('SPAWN_FAILED', (error as Error).message) });
      return undefined;
    } finally {
      subscription?.unsubscribe();
    }
  };

  const outcome = run();
  return {
    runId,
    leaseId,
    spec,
    started,
    outcome,
    stop(reason) {
      stopReason ??= reason;
      stopHook?.();
    },
  };
};
