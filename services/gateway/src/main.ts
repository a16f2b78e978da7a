import { configOrExit } from '@lease/bus';
import { pino } from 'pino';
import { loadGatewayConfig } from './config.js';
import { createGateway } from './gateway.js';

/** Process entry: config, logger, gateway, stop on signal. */
const config = configOrExit(loadGatewayConfig);
const logger = pino({ level: config.logLevel, base: { service: 'gateway', instance: config.instance } });

const gateway = await createGateway({ config, logger }).catch((error: unknown) => {
  logger.fatal({ err: error }, 'gateway could not start');
  process.exit(1);
});

const shutdown = (signal: string) => {
  logger.info({ signal }, 'stopping');
  void gateway.stop().finally(() => process.exit(0));
};
process.once('SIGTERM', () => shutdown('SIGTERM'));
process.once('SIGINT', () => shutdown('SIGINT'));
