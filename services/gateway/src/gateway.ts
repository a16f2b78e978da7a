import { openLeaseLog, Projection, scheduleSnapshots } from '@lease/bus';
import {
  AcquireRequestV1,
  CancelRequestV1,
  COMMAND_SUBJECTS,
  DefineLimitRequestV1,
  GetRequestV1,
  LeaseError,
  ListLimitsRequestV1,
  ListRequestV1,
  parseRequest,
  ReleaseRequestV1,
  RemoveLimitRequestV1,
  RenewManyRequestV1,
  RenewRequestV1,
  RevokeRequestV1,
  SetRequesterLimitRequestV1,
} from '@lease/events';
import { type Service, type ServiceMsg, Svcm } from '@nats-io/services';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import type { z } from 'zod';
import { Admission } from './adapters/admission.js';
import { LogWriter } from './adapters/log-writer.js';
import { Waiting } from './adapters/waiting.js';
import type { GatewayConfig } from './config.js';
import { createCommands, type Result } from './handlers/commands.js';
import { GatewayMetrics } from './metrics.js';

export const SERVICE_NAME = 'lease-gateway';
export const SERVICE_VERSION = '0.1.0';
export const QUEUE_GROUP = 'lease-gateway';

export interface Gateway {
  readonly projection: Projection;
  readonly metrics: GatewayMetrics;
  stop(): Promise<void>;
}

export interface GatewayDeps {
  readonly config: GatewayConfig;
  readonly logger: Logger;
  /** A connection to reuse (tests); otherwise one is opened to `config.natsUrl`. */
  readonly nc?: NatsConnection;
  readonly nowMs?: () => number;
}

/**
 * Starts a gateway replica: the stream is ensured, the service answers at once (NOT_READY
 * until the projection has replayed the log), then serves every verb.
 */
export const createGateway = async (deps: GatewayDeps): Promise<Gateway> => {
  const { config, logger } = deps;
  const nowMs = deps.nowMs ?? Date.now;
  const log = await openLeaseLog({ nc: deps.nc, name: `${SERVICE_NAME}:${config.instance}`, config });
  const { nc, js, jsm, publisher, stream, snapshots, snapshot } = log;
  // The projection folds onto the restored state in place: remember where it started.
  const fromSnapshotSeq = snapshot.found ? snapshot.state.lastSeq : null;
  if (!snapshot.found && snapshot.reason !== 'none')
    logger.warn({ reason: snapshot.reason }, 'ignored the snapshot');
  const metrics = new GatewayMetrics();
  const projection = new Projection({
    js,
    jsm,
    ...(snapshot.found ? { from: snapshot.state } : {}),
    // Nothing is folded before start(), by which time `waiting` exists.
    onEvent: (stored) => waiting.onEvent(stored),
    onProblem: (seq, subject, problem, message) =>
      logger.warn({ seq, subject, problem }, `skipped an event the gateway cannot decode: ${message}`),
  });
  const writer = new LogWriter(publisher, projection, config.instance, metrics);
  const admission = new Admission(
    projection,
    writer,
    config.policy,
    config.admissionBatchMax,
    nowMs,
    metrics,
    logger,
  );
  const waiting: Waiting = new Waiting(projection, admission, nowMs, logger);
  const commands = createCommands({
    projection,
    admission,
    waiting,
    writer,
    policy: config.policy,
    metrics,
    nowMs,
    instance: config.instance,
    waitMaxMs: config.waitMaxMs,
  });

  const service = await new Svcm(nc).add({
    name: SERVICE_NAME,
    version: SERVICE_VERSION,
    description: 'Lease coordinator command side',
    queue: QUEUE_GROUP,
    metadata: { instance: config.instance },
    statsHandler: async () =>
      metrics.snapshot({
        ready: projection.ready,
        foldedSeq: projection.state.lastSeq,
        liveLeases: projection.state.liveCount,
        undecodableEvents: projection.problems,
        anomalies: projection.state.anomalyCount,
      }),
  });

  const endpoint = <S extends z.ZodType, T>(
    subject: string,
    schema: S,
    handle: (request: z.infer<S>) => Promise<Result<T>>,
  ) => {
    const name = subject.replaceAll('.', '_');
    addEndpoint(service, name, subject, async (msg) => {
      const reply = await answer(msg, schema, handle);
      if (!reply.ok) metrics.reject(reply.error.code);
      msg.respond(Buffer.from(JSON.stringify(reply.ok ? reply : { ok: false, error: reply.error.toJSON() })));
    });
  };

  const answer = async <S extends z.ZodType, T>(
    msg: ServiceMsg,
    schema: S,
    handle: (request: z.infer<S>) => Promise<Result<T>>,
  ): Promise<Result<T>> => {
    const parsed = parseRequest(schema, msg.data, config.requestBytesMax);
    if (!parsed.ok) return parsed;
    const notReady = projection.notReady();
    if (notReady) return { ok: false, error: notReady };
    try {
      return await handle(parsed.value);
    } catch (cause) {
      logger.error({ err: cause, subject: msg.subject }, 'command failed unexpectedly');
      return {
        ok: false,
        error: new LeaseError('UNAVAILABLE', `the gateway failed: ${(cause as Error).message}`, { cause }),
      };
    }
  };

  endpoint(COMMAND_SUBJECTS.acquire, AcquireRequestV1, commands.acquire);
  endpoint(COMMAND_SUBJECTS.cancel, CancelRequestV1, commands.cancel);
  endpoint(COMMAND_SUBJECTS.renew, RenewRequestV1, commands.renew);
  endpoint(COMMAND_SUBJECTS.renewMany, RenewManyRequestV1, commands.renewMany);
  endpoint(COMMAND_SUBJECTS.release, ReleaseRequestV1, commands.release);
  endpoint(COMMAND_SUBJECTS.revoke, RevokeRequestV1, commands.revoke);
  endpoint(COMMAND_SUBJECTS.get, GetRequestV1, commands.get);
  endpoint(COMMAND_SUBJECTS.list, ListRequestV1, commands.list);
  endpoint(COMMAND_SUBJECTS.defineLimit, DefineLimitRequestV1, commands.defineLimit);
  endpoint(COMMAND_SUBJECTS.removeLimit, RemoveLimitRequestV1, commands.removeLimit);
  endpoint(COMMAND_SUBJECTS.listLimits, ListLimitsRequestV1, commands.listLimits);
  endpoint(COMMAND_SUBJECTS.setRequesterLimit, SetRequesterLimitRequestV1, commands.setRequesterLimit);

  const started = Date.now();
  logger.info(
    { streamLastSeq: stream.state.last_seq, fromSnapshotSeq },
    'replaying the log; every command answers NOT_READY until done',
  );
  await projection.start();
  logger.info(
    {
      foldedSeq: projection.state.lastSeq,
      fromSnapshotSeq,
      liveLeases: projection.state.liveCount,
      replayMs: Date.now() - started,
    },
    'gateway ready',
  );
  const stopSnapshots = scheduleSnapshots(
    () => (projection.ready ? projection.state : undefined),
    snapshots,
    {
      everyMs: config.snapshotEveryMs,
      minEvents: config.snapshotMinEvents,
      fromSeq: fromSnapshotSeq ?? 0,
      onSaved: (saved) => logger.info(saved, 'snapshot written'),
      onError: (error) => logger.warn({ err: error }, 'snapshot failed'),
    },
  );

  return {
    projection,
    metrics,
    async stop() {
      stopSnapshots();
      waiting.stop();
      await service.stop().catch(() => undefined);
      await projection.stop();
      await log.close();
    },
  };
};

const addEndpoint = (
  service: Service,
  name: string,
  subject: string,
  handler: (msg: ServiceMsg) => Promise<void>,
) => {
  service.addEndpoint(name, {
    subject,
    handler: (error, msg) => {
      if (error) return;
      void handler(msg);
    },
  });
};
