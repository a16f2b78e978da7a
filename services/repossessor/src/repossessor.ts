import { appendEvent, openLeaseLog, Projection } from '@lease/bus';
import { decide, type LeaseRevoked, REPOSSESSOR_STATUS_SUBJECT, type StoredEvent } from '@lease/events';
import { Svcm } from '@nats-io/services';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import type { RepossessorConfig } from './config.js';
import { DeadlineIndex } from './deadline-index.js';

export const SERVICE_NAME = 'lease-repossessor';
export const SERVICE_VERSION = '0.1.0';
/** After a rejected or failed revocation, the lease is looked at again this much later. */
export const RETRY_MS = 100;
/** Lag samples kept for the p50/p99 in the stats. */
export const LAG_SAMPLES_KEPT = 10_000;

export interface RepossessorHooks {
  /**
   * Called after a revocation is decided and before it is appended. Tests pause here to
   * slip a renewal in between, deterministically; production leaves it unset.
   */
  readonly beforeAppend?: (leaseId: string, event: LeaseRevoked) => Promise<void>;
}

export interface RepossessorDeps {
  readonly config: RepossessorConfig;
  readonly logger: Logger;
  readonly nc?: NatsConnection;
  readonly nowMs?: () => number;
  readonly hooks?: RepossessorHooks;
}

export class RepossessorMetrics {
  revoked = 0;
  /** Rejected by JetStream: a renewal, release or another revocation got in first. */
  rejected = 0;
  failed = 0;
  private readonly lags: number[] = [];

  recordLag(lagMs: number): void {
    this.lags.push(lagMs);
    if (this.lags.length > LAG_SAMPLES_KEPT) this.lags.shift();
  }

  snapshot(extra: Record<string, unknown>): Record<string, unknown> {
    const sorted = [...this.lags].sort((a, b) => a - b);
    const at = (q: number) =>
      sorted.length === 0 ? null : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
    return {
      revoked: this.revoked,
      rejected: this.rejected,
      failed: this.failed,
      lagP50Ms: at(0.5),
      lagP99Ms: at(0.99),
      ...extra,
    };
  }
}

export interface Repossessor {
  readonly projection: Projection;
  readonly metrics: RepossessorMetrics;
  stop(): Promise<void>;
}

/**
 * Revokes leases past deadline + grace with a conditional append naming the last sequence
 * it folded on the lease's subject: a renewal or release that got in first makes JetStream
 * reject it (DESIGN.md failure 1). It never frees anything itself; the fold of the
 * revocation does.
 */
export const createRepossessor = async (deps: RepossessorDeps): Promise<Repossessor> => {
  const { config, logger } = deps;
  const nowMs = deps.nowMs ?? Date.now;
  // The repossessor reads the gateways' snapshots; it writes none of its own.
  const log = await openLeaseLog({ nc: deps.nc, name: `${SERVICE_NAME}:${config.instance}`, config });
  const { nc, js, jsm, publisher, snapshot } = log;
  const metrics = new RepossessorMetrics();
  const index = new DeadlineIndex();
  const inflight = new Set<string>();
  const { graceMs } = config;
  /** The first millisecond at which a lease may be revoked as expired: past its deadline plus grace. */
  const revocableAt = (lease: { deadlineMs: number }) => lease.deadlineMs + graceMs + 1;

  // While replaying, the index is not fed event by event: it is built once from the live
  // leases when the replay is done, so a long history costs nothing here.
  const indexEvent = ({ event }: StoredEvent) => {
    if (!projection.ready) return;
    if (event.type === 'LeasesGranted')
      for (const grant of event.grants) index.push(revocableAt(grant), grant.leaseId);
    else if (event.type === 'LeaseRenewed') index.push(revocableAt(event), event.leaseId);
  };
  const projection = new Projection({
    js,
    jsm,
    ...(snapshot.found ? { from: snapshot.state } : {}),
    onEvent: indexEvent,
    onProblem: (seq, subject, problem, message) =>
      logger.warn({ seq, subject, problem }, `skipped an undecodable event: ${message}`),
  });

  const mine = (leaseId: string) =>
    config.shard.count === 1 || shardOf(leaseId, config.shard.count) === config.shard.index;

  const revoke = async (leaseId: string, dueMs: number): Promise<void> => {
    const now = nowMs();
    const decision = decide(projection.state, {
      type: 'RevokeLease',
      leaseId,
      reason: 'expired',
      graceMs,
      nowMs: now,
    });
    if (!decision.ok) return; // ended meanwhile, or renewed: a newer entry is in the index
    const event = decision.events[0] as LeaseRevoked;
    await deps.hooks?.beforeAppend?.(leaseId, event);
    const result = await appendEvent(publisher, event, {
      expectedLastSubjectSeq: event.decidedAgainstSeq,
      msgId: `revoke-${leaseId}-${event.decidedAgainstSeq}`,
    });
    if (result.ok) {
      if (!result.duplicate) metrics.revoked += 1;
      metrics.recordLag(now - dueMs);
      logger.debug({ leaseId, seq: result.seq, deadlineMs: event.deadlineMs }, 'revoked an expired lease');
      return;
    }
    if (result.conflict) metrics.rejected += 1;
    else {
      metrics.failed += 1;
      logger.warn({ leaseId, err: result.error.message }, 'revocation failed; will retry');
    }
    // Look again shortly: a renewal will have moved the deadline, anything else is retried.
    index.push(nowMs() + RETRY_MS, leaseId);
  };

  /** One bounded batch of revocations; returns how many it attempted. */
  const tick = async (): Promise<number> => {
    const now = nowMs();
    const batch: Promise<void>[] = [];
    while (batch.length < config.batchMax) {
      const entry = index.popDue(now);
      if (!entry) break;
      const lease = projection.state.leases.get(entry.leaseId);
      // An entry older than the lease's current deadline was superseded by a renewal's entry.
      if (lease?.status !== 'live' || entry.dueMs < revocableAt(lease) || inflight.has(entry.leaseId))
        continue;
      if (!mine(entry.leaseId) && now < revocableAt(lease) + config.takeoverMs) {
        index.push(revocableAt(lease) + config.takeoverMs, entry.leaseId);
        continue;
      }
      inflight.add(entry.leaseId);
      batch.push(revoke(entry.leaseId, revocableAt(lease)).finally(() => inflight.delete(entry.leaseId)));
    }
    await Promise.all(batch);
    return batch.length;
  };

  let stopping = false;
  let wake: (() => void) | undefined;
  const loop = async () => {
    while (!stopping) {
      const tickStartedMs = performance.now();
      let attempted = 0;
      try {
        attempted = await tick();
      } catch (error) {
        logger.error({ err: error }, 'repossessor tick failed');
      }
      // An expiry burst is worked off at REVOKE_RATE_MAX, not as fast as the server takes it:
      // the gateways' appends share the server and the machine with it.
      const pacedMs = (attempted / config.revokeRateMax) * 1_000 - (performance.now() - tickStartedMs);
      const next = index.peekDueMs();
      const dueInMs =
        next === undefined ? config.tickMs : Math.max(0, Math.min(config.tickMs, next - nowMs()));
      const waitMs = Math.max(dueInMs, pacedMs);
      if (waitMs > 0 || index.size === 0) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, Math.max(waitMs, 1));
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
    }
  };

  const status = () =>
    metrics.snapshot({
      instance: config.instance,
      ready: projection.ready,
      foldedSeq: projection.state.lastSeq,
      indexed: index.size,
      liveLeases: projection.state.liveCount,
    });
  const service = await new Svcm(nc).add({
    name: SERVICE_NAME,
    version: SERVICE_VERSION,
    description: 'Revokes expired leases with conditional appends',
    metadata: { instance: config.instance },
    statsHandler: async () => status(),
  });
  // Every replica answers (no queue group), so that operators see each one's counters; the
  // services protocol reports a service's stats data only for its endpoints.
  service.addEndpoint('status', {
    subject: REPOSSESSOR_STATUS_SUBJECT,
    queue: '',
    handler: (error, msg) => {
      if (!error) msg.respond(JSON.stringify(status()));
    },
  });

  const started = Date.now();
  await projection.start();
  for (const lease of projection.state.leases.values()) {
    if (lease.status === 'live') index.push(revocableAt(lease), lease.leaseId);
  }
  logger.info(
    { foldedSeq: projection.state.lastSeq, indexed: index.size, replayMs: Date.now() - started },
    'repossessor ready',
  );
  const running = loop();

  return {
    projection,
    metrics,
    async stop() {
      stopping = true;
      wake?.();
      await running;
      await service.stop().catch(() => undefined);
      await projection.stop();
      await log.close();
    },
  };
};

/** A stable hash of the lease id, so every replica agrees on who owns which lease. */
export const shardOf = (leaseId: string, count: number): number => {
  let hash = 2166136261;
  for (let i = 0; i < leaseId.length; i++) hash = Math.imul(hash ^ leaseId.charCodeAt(i), 16777619);
  return (hash >>> 0) % count;
};
