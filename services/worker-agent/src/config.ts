import { hostname } from 'node:os';
import { parseEnv } from '@lease/bus';
import { z } from 'zod';
import { WorkerId } from './protocol.js';

const ms = (fallback: number, min = 1) => z.coerce.number().int().min(min).default(fallback);

/** The host name as a worker id: characters a subject token cannot hold become '-'. */
export const defaultWorkerId = (): string =>
  hostname()
    .replace(/[^A-Za-z0-9_-]/g, '-')
    .replace(/^[^A-Za-z0-9]+/, '')
    .slice(0, 64) || 'worker';

/** The daemon's whole configuration, from the environment, parsed once and frozen. */
export const AgentConfigSchema = z.object({
  NATS_URL: z.string().min(1).default('nats://127.0.0.1:4222'),
  NATS_USER: z.string().min(1).optional(),
  NATS_PASSWORD: z.string().optional(),
  /** The holder name of every lease this agent takes, and the token in its subjects. */
  WORKER_ID: WorkerId.optional(),
  /** Run records (lease ids and holder secrets), workload logs, the drain flag. */
  AGENT_STATE_DIR: z.string().min(1).default('/var/lib/lease-agent'),
  /** What may run (jobs and allowlisted commands); without it nothing may. */
  AGENT_JOBS_FILE: z.string().min(1).optional(),
  /** TTL of every renewal, unless a request says otherwise. */
  AGENT_TTL_MS: ms(30_000),
  /** TTL of the grant, for a slow start; never below the renewal TTL. */
  AGENT_INITIAL_TTL_MS: ms(120_000),
  /** SIGKILL follows SIGTERM after this long. */
  AGENT_KILL_GRACE_MS: ms(5_000, 0),
  AGENT_WORKLOADS_MAX: z.coerce.number().int().min(1).max(10_000).default(64),
  AGENT_HEARTBEAT_MS: ms(5_000, 100),
  AGENT_REQUEST_TIMEOUT_MS: z.coerce.number().int().min(100).max(60_000).default(5_000),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
});

export type AgentConfig = Readonly<{
  natsUrl: string;
  natsUser: string | undefined;
  natsPassword: string | undefined;
  workerId: string;
  stateDir: string;
  jobsFile: string | undefined;
  ttlMs: number;
  initialTtlMs: number;
  killGraceMs: number;
  workloadsMax: number;
  heartbeatMs: number;
  requestTimeoutMs: number;
  logLevel: z.infer<typeof AgentConfigSchema>['LOG_LEVEL'];
}>;

export const loadAgentConfig = (env: NodeJS.ProcessEnv = process.env): AgentConfig => {
  const e = parseEnv(AgentConfigSchema, env, 'worker-agent');
  return Object.freeze({
    natsUrl: e.NATS_URL,
    natsUser: e.NATS_USER,
    natsPassword: e.NATS_PASSWORD,
    workerId: e.WORKER_ID ?? defaultWorkerId(),
    stateDir: e.AGENT_STATE_DIR,
    jobsFile: e.AGENT_JOBS_FILE,
    ttlMs: e.AGENT_TTL_MS,
    initialTtlMs: Math.max(e.AGENT_INITIAL_TTL_MS, e.AGENT_TTL_MS),
    killGraceMs: e.AGENT_KILL_GRACE_MS,
    workloadsMax: e.AGENT_WORKLOADS_MAX,
    heartbeatMs: e.AGENT_HEARTBEAT_MS,
    requestTimeoutMs: e.AGENT_REQUEST_TIMEOUT_MS,
    logLevel: e.LOG_LEVEL,
  });
};
