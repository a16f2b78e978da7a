import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { connectBus } from './connection.js';
import { createPublisher } from './publisher.js';
import { type LoadedSnapshot, SnapshotStore } from './snapshots.js';
import { ensureLeaseStream } from './stream.js';

/** The connection settings every service's config carries. */
export interface LeaseLogConfig {
  readonly natsUrl: string;
  readonly natsUser?: string | undefined;
  readonly natsPassword?: string | undefined;
  readonly streamReplicas: number;
}

export interface OpenLeaseLogOptions {
  /** A connection to reuse (tests); otherwise one is opened, and closed by `close()`. */
  readonly nc?: NatsConnection | undefined;
  /** Shows in the server's connection list: service name and instance. */
  readonly name: string;
  readonly config: LeaseLogConfig;
}

/**
 * What every process that folds the log starts with: a checked connection, the stream as
 * configured, and the newest usable snapshot to replay the tail from.
 */
export const openLeaseLog = async (options: OpenLeaseLogOptions) => {
  const { config } = options;
  const nc =
    options.nc ??
    (await connectBus({
      servers: config.natsUrl,
      name: options.name,
      user: config.natsUser,
      pass: config.natsPassword,
    }));
  const stream = await ensureLeaseStream(nc, { replicas: config.streamReplicas });
  const snapshots = await SnapshotStore.open(nc, { replicas: config.streamReplicas });
  const snapshot: LoadedSnapshot = await snapshots.load(stream.state.last_seq);
  const publisher = createPublisher(nc);
  return {
    nc,
    js: jetstream(nc),
    /** Where appends go: pipelined publishes on this connection (appendEvent). */
    publisher,
    jsm: await jetstreamManager(nc),
    stream,
    snapshots,
    snapshot,
    /** Closes the connection if this opened it. */
    close: async () => {
      publisher.close();
      if (!options.nc) await nc.drain().catch(() => undefined);
    },
  };
};
