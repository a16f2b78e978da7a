import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { connectBus } from '@lease/bus';
import { createLeaseClient } from '@lease/client';
import { type Service, type ServiceMsg, Svcm } from '@nats-io/services';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import type { z } from 'zod';
import type { AgentConfig } from './config.js';
import { type JobsFile, loadJobsFile, resolveWorkload } from './jobs.js';
import {
  AGENT_SERVICE_NAME,
  AGENT_VERSION,
  type AgentErrorBody,
  agentError,
  agentSubjects,
  DrainRequestV1,
  type OutcomeV1,
  RunRequestV1,
  type RunStarted,
} from './protocol.js';
import { reconcile } from './reconcile.js';
import { openStateDir, type StateDir } from './state.js';
import { type Run, type StartResult, startRun } from './supervise.js';
import { startWatchdog, type Watchdog } from './watchdog-client.js';

/**
 * The daemon: one per host, under one worker id. It reconciles what a previous agent left
 * in the state dir, starts its watchdog, and then answers run / drain / status requests on
 * its own subjects, publishing each run's outcome and a presence heartbeat.
 */

/** On stop, how long to wait for the workloads' groups to end, on top of the kill grace. */
export const STOP_WAIT_MS = 10_000;

export interface WorkerAgent {
  readonly workerId: string;
  readonly nc: NatsConnection;
  /** Stops accepting, ends every workload (SIGTERM, SIGKILL after the grace), releases, closes. */
  stop(): Promise<void>;
}

const utf8 = new TextDecoder();

type Reply<T> = { ok: true; result: T } | { ok: false; error: AgentErrorBody };

const parse = <S extends z.ZodType>(schema: S, data: Uint8Array): Reply<z.infer<S>> => {
  let raw: unknown;
  try {
    raw = JSON.parse(utf8.decode(data));
  } catch {
    return { ok: false, error: agentError('INVALID_REQUEST', 'the request is not JSON') };
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success)
    return {
      ok: false,
      error: agentError('INVALID_REQUEST', parsed.error.issues[0]?.message ?? 'invalid request'),
    };
  return { ok: true, result: parsed.data };
};

export const createWorkerAgent = async (options: {
  readonly config: AgentConfig;
  readonly logger: Logger;
}): Promise<WorkerAgent> => {
  const { config } = options;
  const { workerId } = config;
  const logger = options.logger.child({ workerId });
  const subjects = agentSubjects(workerId);
  const host = hostname();
  const jobs: JobsFile = loadJobsFile(config.jobsFile);
  const state: StateDir = await openStateDir(config.stateDir);
  let draining = await state.draining();

  const nc = await connectBus({
    servers: config.natsUrl,
    name: `${AGENT_SERVICE_NAME}:${workerId}`,
    user: config.natsUser,
    pass: config.natsPassword,
  });
  const client = createLeaseClient({ nc, timeoutMs: config.requestTimeoutMs });
  const publishOutcome = (outcome: OutcomeV1) => nc.publish(subjects.outcome, JSON.stringify(outcome));

  // Before anything new runs: whatever a previous agent left behind is ended and released.
  const reconciled = await reconcile({ client, state, logger, workerId, graceMs: config.killGraceMs });
  for (const outcome of reconciled.outcomes) publishOutcome(outcome);
  if (reconciled.outcomes.length > 0 || reconciled.kept > 0)
    logger.info(
      { abandoned: reconciled.outcomes.length, kept: reconciled.kept },
      'reconciled the runs of the previous agent',
    );

  let watchdog: Promise<Watchdog> = startWatchdog({ logger });
  await watchdog;
  /** The current watchdog, started again if the last one died (its workloads were ended by then). */
  const currentWatchdog = async (): Promise<Watchdog> => {
    const current = await watchdog;
    if (current.alive) return current;
    watchdog = startWatchdog({ logger });
    return watchdog;
  };

  const runs = new Map<string, Run>();
  const pids = new Map<string, number>();
  const byKey = new Map<string, Run>();
  let stopping = false;

  const refuse = (error: AgentErrorBody, context: Record<string, unknown>): Reply<never> => {
    logger.warn({ code: error.code, ...context }, `refused a run: ${error.message}`);
    return { ok: false, error };
  };

  const handleRun = async (data: Uint8Array): Promise<Reply<RunStarted>> => {
    const parsed = parse(RunRequestV1, data);
    if (!parsed.ok) return refuse(parsed.error, {});
    const request = parsed.result;
    const context = {
      requester: request.requester,
      ...(request.job ? { job: request.job } : { command: request.command }),
    };
    if (stopping) return refuse(agentError('AGENT_STOPPING', 'the agent is stopping'), context);
    if (draining) return refuse(agentError('DRAINING', `${workerId} is draining`), context);
    const resolved = resolveWorkload(jobs, request);
    if (!resolved.ok) return refuse(resolved.error, context);
    const key = request.idempotencyKey ? `${request.requester}\u0000${request.idempotencyKey}` : undefined;
    const previous = key ? byKey.get(key) : undefined;
    if (previous) {
      const result = await previous.started;
      return result.ok ? { ok: true, result: { ...result.started, replayed: true } } : result;
    }
    if (runs.size >= config.workloadsMax)
      return refuse(agentError('AGENT_FULL', `${workerId} runs ${runs.size} workloads already`), context);
    const runId = randomUUID();
    const ttlMs = request.ttlMs ?? config.ttlMs;
    const run = startRun(
      {
        client,
        nc,
        watchdog: currentWatchdog,
        state,
        logger,
        workerId,
        graceMs: config.killGraceMs,
      },
      {
        runId,
        requester: request.requester,
        slots: request.slots,
        ttlMs,
        initialTtlMs: Math.max(ttlMs, request.initialTtlMs ?? config.initialTtlMs),
        ...(request.waitMs ? { waitMs: request.waitMs } : {}),
        ...(request.idempotencyKey ? { idempotencyKey: request.idempotencyKey } : {}),
        ...(request.metadata ? { metadata: request.metadata } : {}),
        workload: resolved.workload,
        output: { kind: 'file', path: state.logPath(runId) },
      },
    );
    runs.set(runId, run);
    if (key) byKey.set(key, run);
    void run.outcome.then((outcome) => {
      runs.delete(runId);
      pids.delete(runId);
      if (key) byKey.delete(key);
      if (outcome) publishOutcome(outcome);
    });
    const result: StartResult = await run.started;
    if (result.ok) pids.set(runId, result.started.pid);
    return result.ok ? { ok: true, result: result.started } : result;
  };

  const handleDrain = async (data: Uint8Array): Promise<Reply<{ draining: boolean; running: number }>> => {
    const parsed = parse(DrainRequestV1, data);
    if (!parsed.ok) return parsed;
    await state.setDraining(parsed.result.draining);
    draining = parsed.result.draining;
    logger.info({ draining, running: runs.size }, draining ? 'draining' : 'accepting workloads again');
    return { ok: true, result: { draining, running: runs.size } };
  };

  const status = async () => ({
    workerId,
    host,
    version: AGENT_VERSION,
    pid: process.pid,
    watchdog: (await watchdog).pid,
    draining,
    stopping,
    running: [...runs.values()].map((run) => ({
      runId: run.runId,
      leaseId: run.leaseId,
      job: run.spec.workload.job,
      requester: run.spec.requester,
      pid: pids.get(run.runId) ?? null,
    })),
  });

  const service: Service = await new Svcm(nc).add({
    name: AGENT_SERVICE_NAME,
    version: AGENT_VERSION,
    description: 'Runs workloads under leases and ends them when their lease is lost',
    metadata: { workerId, host, version: AGENT_VERSION },
    statsHandler: async () => ({ running: runs.size, draining, workloadsMax: config.workloadsMax }),
  });
  const endpoint = (name: string, subject: string, handle: (msg: ServiceMsg) => Promise<Reply<unknown>>) => {
    service.addEndpoint(name, {
      subject,
      handler: (error, msg) => {
        if (error) return;
        void handle(msg)
          .catch((cause: unknown): Reply<never> => {
            logger.error({ err: cause, subject }, 'request failed unexpectedly');
            return { ok: false, error: agentError('INTERNAL', 'internal error') };
          })
          .then((reply) => msg.respond(JSON.stringify(reply)));
      },
    });
  };
  endpoint('run', subjects.run, (msg) => handleRun(msg.data));
  endpoint('drain', subjects.drain, (msg) => handleDrain(msg.data));
  endpoint('status', subjects.status, async () => ({ ok: true, result: await status() }));

  const heartbeat = async () => {
    const { running, ...rest } = await status();
    nc.publish(
      subjects.heartbeat,
      JSON.stringify({ v: 1, ...rest, running: running.length, atMs: Date.now() }),
    );
  };
  await heartbeat();
  const heartbeatTimer = setInterval(() => void heartbeat(), config.heartbeatMs);

  logger.info(
    { host, version: AGENT_VERSION, draining, stateDir: config.stateDir, watchdog: (await watchdog).pid },
    'worker-agent ready',
  );

  return {
    workerId,
    nc,
    async stop() {
      if (stopping) return;
      stopping = true;
      clearInterval(heartbeatTimer);
      await service.stop().catch(() => undefined);
      const ending = [...runs.values()];
      for (const run of ending) run.stop('agent stopping');
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        Promise.all(ending.map((run) => run.outcome)),
        new Promise((resolve) => {
          timer = setTimeout(resolve, config.killGraceMs + STOP_WAIT_MS);
        }),
      ]);
      clearTimeout(timer);
      await (await watchdog).close();
      await nc.flush().catch(() => undefined);
      await nc.close();
    },
  };
};
