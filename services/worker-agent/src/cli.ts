import { randomUUID } from 'node:crypto';
import { connectBus } from '@lease/bus';
import { createLeaseClient } from '@lease/client';
import { LimitName, RequesterId } from '@lease/events';
import { Command, CommanderError, Option } from 'commander';
import { pino } from 'pino';
import { defaultWorkerId } from './config.js';
import { parseDurationMs } from './duration.js';
import { EXIT, exitCodeForOutcome, exitCodeForStartError } from './exit-codes.js';
import { WorkerId } from './protocol.js';
import { startRun } from './supervise.js';
import { startWatchdog } from './watchdog-client.js';

/**
 * The one-shot mode: like flock(1), for a whole fleet.
 *
 *   lease-agent run --limit db-migrations=1 --ttl 30s [--wait 60s] -- ./migrate.sh args
 *
 * Waits for the slots (up to --wait), runs the command under the lease with the daemon's
 * supervision (its own process group, the watchdog, kill on loss), releases the lease when
 * it exits, and exits with its code; or EXIT.NO_SLOT, EXIT.LEASE_LOST, ... (exit-codes.ts).
 * Ctrl-C ends the command (SIGTERM, SIGKILL after --grace) and releases the lease.
 */

export interface OneShotOptions {
  readonly natsUrl: string;
  readonly natsUser: string | undefined;
  readonly natsPassword: string | undefined;
  readonly slots: { limit: string; count: number }[];
  readonly ttlMs: number;
  readonly initialTtlMs: number;
  readonly waitMs: number;
  readonly graceMs: number;
  readonly requester: string;
  readonly workerId: string;
  readonly command: string;
  readonly args: string[];
  readonly logLevel: string;
}

const parseSlot = (text: string): { limit: string; count: number } => {
  const match = /^(.+?)(?:=(\d+))?$/.exec(text);
  const limit = LimitName.safeParse(match?.[1]);
  const count = Number(match?.[2] ?? '1');
  if (!limit.success || !Number.isSafeInteger(count) || count < 1)
    throw new RangeError(`--limit ${text}: expected NAME or NAME=COUNT`);
  return { limit: limit.data, count };
};

/** Parses argv (without node and the script) into options; throws CommanderError on a usage error. */
export const parseOneShot = (
  argv: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
): OneShotOptions => {
  let parsed: OneShotOptions | undefined;
  const program = new Command('lease-agent')
    .exitOverride()
    .configureOutput({ writeErr: (text) => process.stderr.write(text) });
  program
    .command('run')
    .description('run one command under a lease, like flock(1) for a whole fleet')
    .addOption(
      new Option('--limit <name=count>', 'slots to hold (repeatable)')
        .argParser((value: string, previous: string[] = []) => [...previous, value])
        .makeOptionMandatory(),
    )
    .requiredOption('--ttl <duration>', 'TTL of every renewal (e.g. 30s)')
    .option('--initial-ttl <duration>', 'TTL of the grant, for a slow start (default: --ttl)')
    .option('--wait <duration>', 'wait this long for free slots', '0')
    .option('--grace <duration>', 'SIGKILL follows SIGTERM after this long', '5s')
    .option('--requester <name>', 'whom the lease counts against (default: LEASE_REQUESTER or the worker id)')
    .option('--worker-id <id>', 'holder of the lease (default: WORKER_ID or the host name)')
    .option('--nats <url>', 'NATS server(s) (default: NATS_URL or nats://127.0.0.1:4222)')
    .option('--log-level <level>', 'agent log level on stderr', env.LOG_LEVEL ?? 'warn')
    .argument('<command>', 'the command (no shell: an argv, after --)')
    .argument('[args...]', 'its arguments')
    .action((command: string, args: string[], o: Record<string, string | string[] | undefined>) => {
      const duration = (name: string, value: string) => {
        try {
          return parseDurationMs(value);
        } catch (error) {
          throw new CommanderError(EXIT.USAGE, 'lease-agent.usage', `--${name}: ${(error as Error).message}`);
        }
      };
      const usage = (message: string) => new CommanderError(EXIT.USAGE, 'lease-agent.usage', message);
      let slots: { limit: string; count: number }[];
      try {
        slots = (o.limit as string[]).map(parseSlot);
      } catch (error) {
        throw usage((error as Error).message);
      }
      const ttlMs = duration('ttl', o.ttl as string);
      const workerId = WorkerId.safeParse(
        (o.workerId as string | undefined) ?? env.WORKER_ID ?? defaultWorkerId(),
      );
      if (!workerId.success) throw usage(`--worker-id: ${workerId.error.issues[0]?.message}`);
      const requester = RequesterId.safeParse(
        (o.requester as string | undefined) ?? env.LEASE_REQUESTER ?? workerId.data,
      );
      if (!requester.success) throw usage(`--requester: ${requester.error.issues[0]?.message}`);
      parsed = {
        natsUrl: (o.nats as string | undefined) ?? env.NATS_URL ?? 'nats://127.0.0.1:4222',
        natsUser: env.NATS_USER,
        natsPassword: env.NATS_PASSWORD,
        slots,
        ttlMs,
        initialTtlMs: Math.max(ttlMs, o.initialTtl ? duration('initial-ttl', o.initialTtl as string) : ttlMs),
        waitMs: duration('wait', o.wait as string),
        graceMs: duration('grace', o.grace as string),
        requester: requester.data,
        workerId: workerId.data,
        command,
        args,
        logLevel: o.logLevel as string,
      };
    });
  program.parse(['run', ...argv], { from: 'user' });
  if (!parsed) throw new CommanderError(EXIT.USAGE, 'lease-agent.usage', 'nothing to run');
  return parsed;
};

/** Runs the one-shot mode to the end and answers the process exit code. */
export const runOneShot = async (options: OneShotOptions): Promise<number> => {
  const logger = pino(
    { level: options.logLevel, base: { service: 'lease-agent', workerId: options.workerId } },
    pino.destination(2),
  );
  let nc: Awaited<ReturnType<typeof connectBus>>;
  try {
    nc = await connectBus({
      servers: options.natsUrl,
      name: `lease-agent-run:${options.workerId}`,
      user: options.natsUser,
      pass: options.natsPassword,
    });
  } catch (error) {
    process.stderr.write(
      `lease-agent: cannot reach NATS at ${options.natsUrl}: ${(error as Error).message}\n`,
    );
    return EXIT.UNAVAILABLE;
  }
  const watchdog = await startWatchdog({ logger });
  const client = createLeaseClient({ nc, timeoutMs: 5_000 });
  const run = startRun(
    {
      client,
      nc,
      watchdog: async () => watchdog,
      state: undefined,
      logger,
      workerId: options.workerId,
      graceMs: options.graceMs,
    },
    {
      runId: randomUUID(),
      requester: options.requester,
      slots: options.slots,
      ttlMs: options.ttlMs,
      initialTtlMs: options.initialTtlMs,
      ...(options.waitMs > 0 ? { waitMs: options.waitMs } : {}),
      workload: {
        job: null,
        command: options.command,
        args: options.args,
        env: { ...(process.env as Record<string, string>) },
      },
      output: { kind: 'inherit' },
    },
  );
  let interrupted: NodeJS.Signals | undefined;
  const onSignal = (signal: NodeJS.Signals) => {
    interrupted ??= signal;
    run.stop(`interrupted by ${signal}`);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    const started = await run.started;
    if (!started.ok) {
      process.stderr.write(`lease-agent: not run: ${started.error.code}: ${started.error.message}\n`);
      return exitCodeForStartError(started.error.code);
    }
    const outcome = await run.outcome;
    if (!outcome) return EXIT.SOFTWARE;
    if (outcome.outcome === 'lease-lost') process.stderr.write(`lease-agent: ${outcome.reason}\n`);
    return exitCodeForOutcome(
      interrupted && outcome.outcome === 'agent-stopped' ? { ...outcome, signal: interrupted } : outcome,
    );
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await watchdog.close();
    await nc.close();
  }
};
