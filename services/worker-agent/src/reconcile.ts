import type { LeaseClient } from '@lease/client';
import { ERROR_CODES, isLeaseError } from '@lease/events';
import type { Logger } from 'pino';
import { groupAlive, procStat, terminateGroup } from './process-group.js';
import type { OutcomeV1 } from './protocol.js';
import type { RunRecord, StateDir } from './state.js';

/**
 * The start-up reconcile (ADR 0008). A record left in the state dir belongs to a run of an
 * agent that died: its watchdog saw the pipe close and ended the workload's group, so no
 * workload of a dead agent is still supervised, and none is reattached. The reconcile
 * makes sure of it (ends a group that is somehow still alive: the watchdog died too), then
 * releases the lease with the secret from the record, and reports the run as abandoned.
 * Leases the gateway lists for this holder with no record are logged: without their
 * secret they can only end at their deadline.
 */

/** Release attempts per record on retryable errors (a gateway starting together with the agent). */
export const RECONCILE_RELEASE_ATTEMPTS_MAX = 8;
const RETRY_DELAY_MAX_MS = 2_000;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** The group is still the one the record names: a later group with the same id has another leader. */
const isOurGroup = (record: RunRecord): boolean => {
  if (record.pgid === undefined || !groupAlive(record.pgid)) return false;
  const leader = procStat(record.pgid);
  if (leader === undefined || leader.state === 'Z') return true; // leader gone, its group lives on: ours
  return record.startTicks === undefined || leader.startTicks === record.startTicks;
};

export interface ReconcileResult {
  readonly outcomes: OutcomeV1[];
  /** Records kept because their lease could not be released yet (tried again at the next start). */
  readonly kept: number;
  /** Live leases held by this worker id that no record names. */
  readonly unknownLeases: string[];
}

export const reconcile = async (deps: {
  readonly client: Pick<LeaseClient, 'release' | 'list'>;
  readonly state: StateDir;
  readonly logger: Logger;
  readonly workerId: string;
  readonly graceMs: number;
}): Promise<ReconcileResult> => {
  const { client, state, logger, workerId, graceMs } = deps;
  const records = await state.listRuns((file, problem) =>
    logger.error({ file, problem }, 'unreadable run record: left in place'),
  );
  const outcomes: OutcomeV1[] = [];
  let kept = 0;
  for (const record of records) {
    const log = logger.child({ runId: record.runId, leaseId: record.leaseId });
    let killed = false;
    if (isOurGroup(record)) {
      log.warn({ pgid: record.pgid }, 'a workload of the previous agent still runs: ending it');
      killed = (await terminateGroup(record.pgid!, graceMs)).killed;
    }
    let released = false;
    let settled = false;
    for (let attempt = 1; attempt <= RECONCILE_RELEASE_ATTEMPTS_MAX && !settled; attempt++) {
      try {
        await client.release(record, {
          detail: `worker-agent ${workerId} restarted: the workload no longer runs`,
        });
        released = true;
        settled = true;
      } catch (error) {
        const code = isLeaseError(error) ? error.code : 'UNAVAILABLE';
        // A final answer settles it: never granted (UNKNOWN_LEASE), already ended, not ours.
        settled = !ERROR_CODES[code].retryable;
        if (!settled) await sleep(Math.min(RETRY_DELAY_MAX_MS, 100 * 2 ** (attempt - 1)));
        else log.info({ code }, 'nothing to release');
      }
    }
    if (!settled) {
      kept += 1;
      log.warn('the lease could not be released now: the record is kept for the next start');
      continue;
    }
    await state.removeRun(record.runId);
    if (released) log.info('released the lease of a workload that no longer runs');
    if (record.phase === 'running') {
      const now = Date.now();
      outcomes.push({
        v: 1,
        workerId,
        runId: record.runId,
        leaseId: record.leaseId,
        job: record.job,
        requester: record.requester,
        outcome: 'abandoned',
        exitCode: null,
        signal: null,
        reason: 'the agent died while the workload ran; its watchdog ended it',
        lostCode: null,
        killed,
        released,
        startedAtMs: record.createdAtMs,
        endedAtMs: now,
        lostAtMs: null,
        goneAtMs: null,
      });
    }
  }
  const known = new Set(records.map((record) => record.leaseId));
  const unknownLeases: string[] = [];
  try {
    const listed = await client.list({ holder: workerId });
    for (const lease of listed.leases) {
      if (lease.status === 'live' && !known.has(lease.leaseId)) unknownLeases.push(lease.leaseId);
    }
    if (unknownLeases.length > 0)
      logger.warn(
        { leaseIds: unknownLeases.slice(0, 20), count: unknownLeases.length },
        'live leases held by this worker id with no record: they end at their deadline',
      );
  } catch (error) {
    logger.warn({ err: error }, 'could not list the leases held by this worker id');
  }
  return { outcomes, kept, unknownLeases };
};
