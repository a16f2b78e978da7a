import { connect, type NatsConnection } from '@nats-io/transport-node';
import { checkConnectedServer } from './server-version.js';

export interface BusConnectOptions {
  /** One URL or a comma-separated list (a cluster). */
  readonly servers: string | readonly string[];
  /** Shows in the server's connection list: service name and instance. */
  readonly name: string;
  readonly timeoutMs?: number;
  /** Credentials, when the servers require them (deploy/nats/accounts.conf). */
  readonly user?: string | undefined;
  readonly pass?: string | undefined;
}

/**
 * Connects, refuses a server older than the minimum (see server-version.ts), and keeps
 * reconnecting forever: a NATS outage is a retryable condition for every service, never
 * a reason to exit.
 */
export const connectBus = async (options: BusConnectOptions): Promise<NatsConnection> => {
  const servers = typeof options.servers === 'string' ? options.servers.split(',') : [...options.servers];
  const nc = await connect({
    servers,
    name: options.name,
    timeout: options.timeoutMs ?? 5_000,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    pingInterval: 10_000,
    // Without it every request and publish builds two Errors with stack traces, in case it
    // fails: 28 % of the gateway's CPU under renewal load (bench/README.md).
    noAsyncTraces: true,
    ...(options.user ? { user: options.user, pass: options.pass ?? '' } : {}),
  });
  try {
    checkConnectedServer(nc);
  } catch (error) {
    await nc.close();
    throw error;
  }
  return nc;
};
