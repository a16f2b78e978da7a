import { connectBus } from '@lease/bus';
import { createGateway, type GatewayConfig, loadGatewayConfig } from '@lease/gateway';
import { createRepossessor, loadRepossessorConfig, type RepossessorHooks } from '@lease/repossessor';
import type { NatsConnection } from '@nats-io/transport-node';
import { pino } from 'pino';

/**
 * In-process services for the integration tier: the real gateway and repossessor code on
 * a real nats-server, each on a connection of its own (as separate processes would be).
 * The end-to-end tier runs the built services as processes instead.
 */
const quiet = pino({ level: process.env.LEASE_TEST_LOG ?? 'silent' });

export const startGateway = async (url: string, env: Record<string, string> = {}, nowMs?: () => number) => {
  const config: GatewayConfig = loadGatewayConfig({
    NATS_URL: url,
    GATEWAY_INSTANCE: `gw-${Math.random().toString(36).slice(2, 8)}`,
    ...env,
  });
  return createGateway({ config, logger: quiet, ...(nowMs ? { nowMs } : {}) });
};

export const startRepossessor = async (
  url: string,
  env: Record<string, string> = {},
  options: { hooks?: RepossessorHooks; nowMs?: () => number } = {},
) => {
  const config = loadRepossessorConfig({
    NATS_URL: url,
    REPOSSESSOR_INSTANCE: `rp-${Math.random().toString(36).slice(2, 8)}`,
    ...env,
  });
  return createRepossessor({ config, logger: quiet, ...options });
};

export const connectTest = (url: string): Promise<NatsConnection> =>
  connectBus({ servers: url, name: 'test' });

/** Polls until `check` returns a value other than undefined/false, or fails after `timeoutMs`. */
export const eventually = async <T>(
  check: () => T | Promise<T>,
  timeoutMs = 10_000,
  intervalMs = 20,
): Promise<NonNullable<T>> => {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value !== undefined && value !== null && value !== false) return value as NonNullable<T>;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline)
      throw new Error(`condition not met within ${timeoutMs} ms${last ? `: ${String(last)}` : ''}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
};
