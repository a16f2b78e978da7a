import { configOrExit } from '@lease/bus';
import { pino } from 'pino';
import { loadRepossessorConfig } from './config.js';
import { createRepossessor } from './repossessor.js';

/** Process entry: config, logger, repossessor, stop on signal. */
const config = configOrExit(loadRepossessorConfig);
const logger = pino({ level: config.logLevel, base: { service: 'repossessor', instance: config.instance } });

const repossessor = await createRepossessor({ config, logger }).catch((error: unknown) => {
  logger.fatal({ err: error }, 'repossessor could not start');
  process.exit(1);
});

const shutdown = (signal: string) => {
  logger.info({ signal }, 'stopping');
  void repossessor.stop().finally(() => process.exit(0));
};
process.once('SIGTERM', () => shutdown('SIGTERM'));
process.once('SIGINT', () => shutdown('SIGINT'));
