#!/usr/bin/env node
import { CommanderError } from 'commander';
import { pino } from 'pino';
import { createWorkerAgent } from './agent.js';
import { parseOneShot, runOneShot } from './cli.js';
import { loadAgentConfig } from './config.js';
import { EXIT } from './exit-codes.js';

/**
 * Process entry. `lease-agent run [options] -- command args...` is the one-shot mode;
 * anything else (no arguments, or `daemon`) runs the daemon, configured by its environment.
 */
const [mode, ...rest] = process.argv.slice(2);

if (mode === 'run') {
  let code: number;
  try {
    code = await runOneShot(parseOneShot(rest));
  } catch (error) {
    if (error instanceof CommanderError) {
      code = error.code === 'commander.helpDisplayed' || error.code === 'commander.help' ? 0 : EXIT.USAGE;
      if (error.code === 'lease-agent.usage') process.stderr.write(`lease-agent: ${error.message}\n`);
    } else {
      process.stderr.write(`lease-agent: ${(error as Error).stack ?? String(error)}\n`);
      code = EXIT.SOFTWARE;
    }
  }
  process.exit(code);
} else if (mode === undefined || mode === 'daemon') {
  const config = loadAgentConfig();
  const logger = pino({ level: config.logLevel, base: { service: 'worker-agent' } });
  const agent = await createWorkerAgent({ config, logger }).catch((error: unknown) => {
    logger.fatal({ err: error }, 'worker-agent could not start');
    process.exit(1);
  });
  const shutdown = (signal: string) => {
    logger.info({ signal }, 'stopping');
    void agent.stop().finally(() => process.exit(0));
  };
  process.once('SIGTERM', () => shutdown('SIGTERM'));
  process.once('SIGINT', () => shutdown('SIGINT'));
} else {
  process.stderr.write(
    `lease-agent: unknown mode ${mode}: use \`lease-agent run ... -- command\` or \`lease-agent daemon\`\n`,
  );
  process.exit(EXIT.USAGE);
}
