import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { connectBus } from './connection.js';
import { type LoadedSnapshot, SnapshotStore } from './snapshots.js';
import { ensureLeaseStream } from './stream.js';

export interface OpenLeaseLogOptions {
  /** A connection to reuse (tests); otherwise one is opened, and closed by `close()`. */
  readonly nc?: NatsConnection | undefined;
  readonly servers: string;
  readonly name: string;
  readonly user?: string | undefined;
  readonly pass?: string | undefined;
  readonly replicas: number;
}

/**
 * What every process that folds the log starts with: a checked connection, the stream as
 * configured, and the newest usable snapshot to replay the tail from.
 */
export const openLeaseLog = async (options: OpenLeaseLogOptions) => {
  const nc =
    options.nc ??
    (await connectBus({
      servers: options.servers,
      name: options.name,
      user: options.user,
      pass: options.pass,
    }));
  const stream = await ensureLeaseStream(nc, { replicas: options.replicas });
  const snapshots = await SnapshotStore.open(nc, { replicas: options.replicas });
  const snapshot: LoadedSnapshot = await snapshots.load(stream.state.last_seq);
  return {
    nc,
    js: jetstream(nc),
    jsm: await jetstreamManager(nc),
    stream,
    snapshots,
    snapshot,
    /** Closes the connection if this opened it. */
    close: async () => {
      if (!options.nc) await nc.drain().catch(() => undefined);
    },
  };
};
