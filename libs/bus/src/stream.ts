import { leaseStreamConfig } from '@lease/events';
import { jetstreamManager, type StreamConfig } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';

type LeaseStreamConfig = ReturnType<typeof leaseStreamConfig>;

/**
 * Creates the lease stream, or brings an existing one up to the configuration, then reads
 * it back: a server silently ignores a field it does not know, and every guarantee here
 * rests on these fields being in force.
 */
export const ensureLeaseStream = async (nc: NatsConnection, options: { replicas?: number } = {}) => {
  const wanted = leaseStreamConfig(options);
  const jsm = await jetstreamManager(nc);
  let info = await jsm.streams.info(wanted.name).catch(() => undefined);
  if (!info) {
    info = await jsm.streams.add(wanted as Partial<StreamConfig> as StreamConfig);
  } else if (drift(info.config, wanted).length > 0) {
    // Replicas and storage cannot change in place; everything else can.
    const { storage: _storage, ...updatable } = wanted;
    info = await jsm.streams.update(wanted.name, updatable as Partial<StreamConfig>);
  }
  const remaining = drift(info.config, wanted);
  if (remaining.length > 0) {
    throw new Error(
      `stream ${wanted.name} does not hold the configuration it needs: ${remaining.join(', ')}`,
    );
  }
  return info;
};

const drift = (actual: StreamConfig, wanted: LeaseStreamConfig): string[] => {
  const problems: string[] = [];
  for (const [key, value] of Object.entries(wanted)) {
    const got = (actual as unknown as Record<string, unknown>)[key];
    if (JSON.stringify(got) !== JSON.stringify(value)) {
      problems.push(`${key} is ${JSON.stringify(got)}, wanted ${JSON.stringify(value)}`);
    }
  }
  return problems;
};
