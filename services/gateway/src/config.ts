import { parseEnv } from '@lease/bus';
import { DEFAULT_POLICY, REQUEST_BYTES_MAX } from '@lease/events';
import { z } from 'zod';

const int = (fallback: number) => z.coerce.number().int().nonnegative().default(fallback);

/** The gateway's whole configuration, from the environment, parsed once and frozen. */
export const GatewayConfigSchema = z.object({
  NATS_URL: z.string().min(1).default('nats://127.0.0.1:4222'),
  NATS_USER: z.string().min(1).optional(),
  NATS_PASSWORD: z.string().optional(),
  GATEWAY_INSTANCE: z.string().min(1).default(`gw-${process.pid}`),
  STREAM_REPLICAS: z.coerce.number().int().min(1).max(5).default(1),
  TTL_MIN_MS: int(DEFAULT_POLICY.ttlMinMs),
  TTL_MAX_MS: int(DEFAULT_POLICY.ttlMaxMs),
  METADATA_MAX_BYTES: int(DEFAULT_POLICY.metadataMaxBytes),
  REQUEST_BYTES_MAX: int(REQUEST_BYTES_MAX),
  /** Acquires decided in one pass and carried by one append (group commit). */
  ADMISSION_BATCH_MAX: z.coerce.number().int().min(1).max(1_000).default(256),
  /** The longest an acquire may wait for slots; longer waits asked for are cut to it. */
  WAIT_MAX_MS: z.coerce.number().int().min(0).max(3_600_000).default(600_000),
  SNAPSHOT_EVERY_MS: z.coerce.number().int().min(100).default(30_000),
  SNAPSHOT_MIN_EVENTS: z.coerce.number().int().min(1).default(10_000),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
});

export type GatewayConfig = Readonly<{
  natsUrl: string;
  natsUser: string | undefined;
  natsPassword: string | undefined;
  instance: string;
  streamReplicas: number;
  policy: { ttlMinMs: number; ttlMaxMs: number; metadataMaxBytes: number };
  requestBytesMax: number;
  admissionBatchMax: number;
  waitMaxMs: number;
  snapshotEveryMs: number;
  snapshotMinEvents: number;
  logLevel: z.infer<typeof GatewayConfigSchema>['LOG_LEVEL'];
}>;

export const loadGatewayConfig = (env: NodeJS.ProcessEnv = process.env): GatewayConfig => {
  const e = parseEnv(GatewayConfigSchema, env, 'gateway');
  if (e.TTL_MIN_MS > e.TTL_MAX_MS)
    throw new Error('gateway configuration is invalid: TTL_MIN_MS > TTL_MAX_MS');
  return Object.freeze({
    natsUrl: e.NATS_URL,
    natsUser: e.NATS_USER,
    natsPassword: e.NATS_PASSWORD,
    instance: e.GATEWAY_INSTANCE,
    streamReplicas: e.STREAM_REPLICAS,
    policy: Object.freeze({
      ttlMinMs: e.TTL_MIN_MS,
      ttlMaxMs: e.TTL_MAX_MS,
      metadataMaxBytes: e.METADATA_MAX_BYTES,
    }),
    requestBytesMax: e.REQUEST_BYTES_MAX,
    admissionBatchMax: e.ADMISSION_BATCH_MAX,
    waitMaxMs: e.WAIT_MAX_MS,
    snapshotEveryMs: e.SNAPSHOT_EVERY_MS,
    snapshotMinEvents: e.SNAPSHOT_MIN_EVENTS,
    logLevel: e.LOG_LEVEL,
  });
};
