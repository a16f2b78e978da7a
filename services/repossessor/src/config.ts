import { parseEnv } from '@lease/bus';
import { z } from 'zod';

const RepossessorConfigSchema = z.object({
  NATS_URL: z.string().min(1).default('nats://127.0.0.1:4222'),
  NATS_USER: z.string().min(1).optional(),
  NATS_PASSWORD: z.string().optional(),
  REPOSSESSOR_INSTANCE: z.string().min(1).default(`repo-${process.pid}`),
  STREAM_REPLICAS: z.coerce.number().int().min(1).max(5).default(1),
  /** Waited past a deadline before revoking: covers clock skew between gateways and repossessors (ADR 0003). */
  GRACE_MS: z.coerce.number().int().nonnegative().default(1_000),
  /** Revocations appended concurrently in one tick; the rest wait for the next tick. */
  /**
   * Revocations in flight at once. Bounded so that an expiry burst does not queue the
   * gateways' appends behind it: at 512 acquire p99 rose 8x during a 10k burst, at 16 3.6x,
   * and bursts still cleared in under 2 s (bench/README.md).
   */
  BATCH_MAX: z.coerce.number().int().min(1).max(10_000).default(16),
  /** Revocations per second at most, so that a burst leaves room for the gateways (bench/README.md). */
  REVOKE_RATE_MAX: z.coerce.number().int().min(1).default(8_000),
  /** Idle wake-up when no deadline is near: bounds how late a revocation can be after a clock jump. */
  TICK_MS: z.coerce.number().int().min(5).max(60_000).default(250),
  /** "i/n": this replica revokes its own share at once and the others' only after TAKEOVER_MS. */
  SHARD: z
    .string()
    .regex(/^\d+\/\d+$/)
    .default('0/1'),
  TAKEOVER_MS: z.coerce.number().int().nonnegative().default(500),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
});

export type RepossessorConfig = Readonly<{
  natsUrl: string;
  natsUser: string | undefined;
  natsPassword: string | undefined;
  instance: string;
  streamReplicas: number;
  graceMs: number;
  batchMax: number;
  revokeRateMax: number;
  tickMs: number;
  shard: { index: number; count: number };
  takeoverMs: number;
  logLevel: z.infer<typeof RepossessorConfigSchema>['LOG_LEVEL'];
}>;

export const loadRepossessorConfig = (env: NodeJS.ProcessEnv = process.env): RepossessorConfig => {
  const e = parseEnv(RepossessorConfigSchema, env, 'repossessor');
  const [index, count] = e.SHARD.split('/').map(Number) as [number, number];
  if (count < 1 || index >= count) throw new Error(`repossessor configuration is invalid: SHARD ${e.SHARD}`);
  return Object.freeze({
    natsUrl: e.NATS_URL,
    natsUser: e.NATS_USER,
    natsPassword: e.NATS_PASSWORD,
    instance: e.REPOSSESSOR_INSTANCE,
    streamReplicas: e.STREAM_REPLICAS,
    graceMs: e.GRACE_MS,
    batchMax: e.BATCH_MAX,
    revokeRateMax: e.REVOKE_RATE_MAX,
    tickMs: e.TICK_MS,
    shard: Object.freeze({ index, count }),
    takeoverMs: e.TAKEOVER_MS,
    logLevel: e.LOG_LEVEL,
  });
};
