import { userInfo } from 'node:os';
import { connectBus, type EventFilter, subscribe } from '@lease/bus';
import { createLeaseClient, type LeaseClient } from '@lease/client';
import {
  type AuditFinding,
  formatFinding,
  isLeaseError,
  LeaseError,
  type LeaseEventType,
  LeaseEventV1,
  LeaseId,
  type LeaseView,
  LimitName,
  leaseView,
  limitViews,
  Name,
  STREAM_NAME,
} from '@lease/events';
import { jetstreamManager } from '@nats-io/jetstream';
import { Svcm } from '@nats-io/services';
import type { NatsConnection } from '@nats-io/transport-node';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import {
  describePoint,
  EXPORT_CSV_HEADER,
  exportCsvRow,
  historyLine,
  type LogPoint,
  leasesTable,
  limitsTable,
  parseLogPoint,
  progressText,
  table,
  tailLine,
} from './format.js';
import {
  admissionHistory,
  audit,
  leaseEvents,
  type OnProgress,
  readLog,
  replayAt,
  streamLastSeq,
  WAIT_WINDOW_MS,
} from './log.js';

/** Exit codes: documented in docs/leasectl.md. */
export const EXIT = { ok: 0, failed: 1, usage: 2, unavailable: 3 } as const;
export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

/** The NATS micro-service names of the gateway and the repossessor (their SERVICE_NAME). */
export const GATEWAY_SERVICE = 'lease-gateway';
export const REPOSSESSOR_SERVICE = 'lease-repossessor';
/** How long `status` collects answers from service replicas. */
export const SERVICE_DISCOVERY_MS = 1_000;
/** Replays shorter than this show no progress bar. */
export const PROGRESS_MIN_EVENTS = 5_000;
const PROGRESS_EVERY_MS = 100;
/** The audit's --json report lists at most this many findings (all are counted). */
export const AUDIT_FINDINGS_LISTED_MAX = 10_000;
const DEFAULT_SERVER = 'nats://127.0.0.1:4222';
const EVENT_TYPES: string[] = LeaseEventV1.options.map((option) => option.shape.type.value);

/** Where the CLI writes, and what it knows of its terminal: a process, or a test. */
export interface Io {
  out(line: string): void;
  err(line: string): void;
  /** Progress bars go to stderr only when it is a terminal. */
  readonly errIsTTY: boolean;
  /** Raw writes to stderr (the progress bar's carriage returns). */
  errRaw?(text: string): void;
  readonly env: Readonly<Record<string, string | undefined>>;
  /** Aborted on SIGINT: ends `tail`. */
  readonly interrupt?: AbortSignal;
}

interface GlobalOptions {
  server?: string;
  json?: boolean;
  timeout: number;
}

const intOption =
  (what: string, min: number) =>
  (text: string): number => {
    const value = Number(text);
    if (!Number.isSafeInteger(value) || value < min)
      throw new InvalidArgumentError(`${what} must be an integer >= ${min}`);
    return value;
  };

const pointOption = (text: string): LogPoint => {
  try {
    return parseLogPoint(text);
  } catch (error) {
    throw new InvalidArgumentError((error as Error).message);
  }
};

const nameOption =
  (schema: typeof Name | typeof LeaseId, what: string) =>
  (text: string): string => {
    const parsed = schema.safeParse(text);
    if (!parsed.success)
      throw new InvalidArgumentError(`${what} ${JSON.stringify(text)}: ${parsed.error.issues[0]?.message}`);
    return parsed.data;
  };

const asLeaseError = (cause: unknown): LeaseError => {
  if (cause instanceof LeaseError) return cause;
  if (isLeaseError(cause)) return new LeaseError(cause.code, cause.message, { cause });
  return new LeaseError('UNAVAILABLE', cause instanceof Error ? cause.message : String(cause), { cause });
};

/** The admin's name for the log: LEASECTL_ACTOR, else the login name when it is a valid name. */
const defaultActor = (env: Io['env']): string => {
  const candidates = [
    env.LEASECTL_ACTOR,
    (() => {
      try {
        return userInfo().username;
      } catch {
        return undefined;
      }
    })(),
  ];
  for (const candidate of candidates) if (candidate && Name.safeParse(candidate).success) return candidate;
  return 'leasectl';
};

class Progress {
  private lastDrawMs = 0;
  private readonly startedMs = performance.now();
  private drawn = false;
  constructor(private readonly io: Io) {}
  readonly tick: OnProgress = (seq, lastSeq) => {
    if (lastSeq < PROGRESS_MIN_EVENTS) return;
    const nowMs = performance.now();
    if (nowMs - this.lastDrawMs < PROGRESS_EVERY_MS && seq < lastSeq) return;
    this.lastDrawMs = nowMs;
    const perSecond = seq / Math.max(0.001, (nowMs - this.startedMs) / 1000);
    this.io.errRaw?.(`\r${progressText(seq, lastSeq, perSecond)}`);
    this.drawn = true;
  };
  finish(): void {
    if (this.drawn) this.io.errRaw?.('\r\x1b[2K');
    this.drawn = false;
  }
}

/**
 * Runs one leasectl command line (without the node and script arguments) and returns its
 * exit code. Never throws and never exits the process: main.ts does that.
 */
export const runLeasectl = async (argv: readonly string[], io: Io): Promise<ExitCode> => {
  let code: ExitCode = EXIT.ok;
  const program = new Command('leasectl')
    .description(
      "The lease coordinator's operator CLI: state, history, replay, audit, tail and export of the lease log",
    )
    .option(
      '-s, --server <url>',
      'NATS server URL(s), comma-separated (default: $NATS_URL, else nats://127.0.0.1:4222)',
    )
    .option('--json', 'machine-readable output (JSON; JSON lines for tail and export)')
    .option('--timeout <ms>', 'request timeout for gateway calls', intOption('--timeout', 1), 5_000)
    .exitOverride()
    .configureOutput({
      writeOut: (text) => io.out(text.replace(/\n$/, '')),
      writeErr: (text) => io.err(text.replace(/\n$/, '')),
    })
    .showHelpAfterError('(run leasectl --help for usage)');

  /** Wraps an action: a connection for its length, every failure turned into an exit code. */
  const withNats =
    <A extends unknown[]>(action: (ctx: Context, ...args: A) => Promise<ExitCode>) =>
    async (...args: A) => {
      const cmd = args[args.length - 1] as Command;
      const globals = cmd.optsWithGlobals() as GlobalOptions;
      const ctx = new Context(io, globals);
      try {
        code = await action(ctx, ...args);
      } catch (cause) {
        if (cause instanceof InvalidArgumentError) {
          io.err(`leasectl: ${cause.message}`);
          code = EXIT.usage;
        } else {
          code = ctx.fail(asLeaseError(cause));
        }
      } finally {
        await ctx.close();
      }
    };

  program
    .command('status')
    .description('limits with used/free slots and live leases, service replicas seen, projection lag')
    .action(withNats((ctx) => status(ctx)));

  const limits = program.command('limits').description('list, set or remove limits (through the gateway)');
  limits
    .command('list', { isDefault: true })
    .description('every limit with its used and free slots, and requester limits')
    .action(withNats((ctx) => limitsList(ctx)));
  limits
    .command('set <limit> <slotsMax>')
    .description('defines a limit, or resizes it (never below the slots in use)')
    .option('--actor <name>', 'who asks, written to the log (default: $LEASECTL_ACTOR or the login name)')
    .action(
      withNats(async (ctx, limit: string, slotsMax: string, opts: { actor?: string }) => {
        const name = nameOption(LimitName, 'limit')(limit);
        const slots = intOption('slotsMax', 1)(slotsMax);
        const view = await (await ctx.client()).defineLimit({
          limit: name,
          slotsMax: slots,
          actor: opts.actor ?? defaultActor(io.env),
        });
        ctx.print({ limit: view }, () => (view ? limitsTable([view]) : `limit ${name}: unchanged`));
        return EXIT.ok;
      }),
    );
  limits
    .command('remove <limit>')
    .description('removes a limit that no live lease holds slots of')
    .option('--actor <name>', 'who asks, written to the log')
    .action(
      withNats(async (ctx, limit: string, opts: { actor?: string }) => {
        const name = nameOption(LimitName, 'limit')(limit);
        const view = await (await ctx.client()).removeLimit({
          limit: name,
          actor: opts.actor ?? defaultActor(io.env),
        });
        ctx.print({ removed: name, limit: view }, () => `limit ${name} removed`);
        return EXIT.ok;
      }),
    );

  program
    .command('leases')
    .description('leases the gateway holds, filtered')
    .option('--requester <name>', 'only this requester', nameOption(Name, 'requester'))
    .option('--limit <name>', 'only leases holding slots of this limit', nameOption(Name, 'limit'))
    .option('--holder <name>', 'only this holder', nameOption(Name, 'holder'))
    .option('--all', 'include ended leases the gateway still keeps')
    .option('--max <n>', 'at most this many (1..1000)', intOption('--max', 1), 1_000)
    .action(
      withNats(
        async (
          ctx,
          opts: { requester?: string; limit?: string; holder?: string; all?: boolean; max: number },
        ) => {
          const list = await (await ctx.client()).list({
            ...(opts.requester ? { requester: opts.requester } : {}),
            ...(opts.limit ? { limit: opts.limit } : {}),
            ...(opts.holder ? { holder: opts.holder } : {}),
            ...(opts.all ? { includeEnded: true } : {}),
            max: Math.min(opts.max, 1_000),
          });
          ctx.print(list, () =>
            [
              leasesTable(list.leases),
              `${list.leases.length} of ${list.total} leases${list.truncated ? ' (truncated)' : ''}`,
            ].join('\n'),
          );
          return EXIT.ok;
        },
      ),
    );

  program
    .command('lease <leaseId>')
    .description('a lease now, and its whole history from the log')
    .action(withNats((ctx, leaseId: string) => leaseHistory(ctx, nameOption(LeaseId, 'lease id')(leaseId))));

  program
    .command('replay')
    .description('the state of every limit and lease at a point of the log, rebuilt from the log alone')
    .requiredOption(
      '--at <seq|time>',
      'a stream sequence, or an ISO 8601 time (UTC unless it names a zone)',
      pointOption,
    )
    .option('--all', 'include the ended leases the fold keeps')
    .action(
      withNats((ctx, opts: { at: LogPoint; all?: boolean }) => replay(ctx, opts.at, opts.all === true)),
    );

  program
    .command('audit')
    .description('replays the whole log and checks every invariant; exit 1 on any violation')
    .option('--timeout-s <s>', 'give up when the replay takes longer', intOption('--timeout-s', 1), 1_800)
    .action(withNats((ctx, opts: { timeoutS: number }) => runAudit(ctx, opts.timeoutS * 1000)));

  program
    .command('tail')
    .description('follows the log, filtered; until --count events or SIGINT')
    .option('--from <start|now|seq|time>', 'where to start', 'now')
    .option('--count <n>', 'stop after this many events', intOption('--count', 1))
    .option('--limit <name>', 'only events of this limit', nameOption(Name, 'limit'))
    .option('--requester <name>', 'only events of this requester', nameOption(Name, 'requester'))
    .option('--lease <leaseId>', 'only events of this lease', nameOption(LeaseId, 'lease id'))
    .addOption(new Option('--type <type...>', 'only these event types').choices(EVENT_TYPES))
    .action(withNats((ctx, opts: TailOptions) => tail(ctx, opts)));

  program
    .command('export')
    .description('writes the log (or a range of it) as JSON lines or CSV on stdout')
    .option('--from <seq|time>', 'first sequence or time (default: the start)', pointOption)
    .option('--to <seq|time>', 'last sequence or time (default: the end when the export began)', pointOption)
    .addOption(new Option('--format <format>', 'output format').choices(['jsonl', 'csv']).default('jsonl'))
    .action(
      withNats((ctx, opts: { from?: LogPoint; to?: LogPoint; format: 'jsonl' | 'csv' }) =>
        exportLog(ctx, opts),
      ),
    );

  program
    .command('revoke <leaseId>')
    .description('revokes a lease as an admin (through the gateway); its slots are freed')
    .requiredOption('--reason <text>', 'why, written to the log as the revocation detail')
    .option('--actor <name>', 'who asks, written to the log (default: $LEASECTL_ACTOR or the login name)')
    .action(
      withNats(async (ctx, leaseId: string, opts: { reason: string; actor?: string }) => {
        const id = nameOption(LeaseId, 'lease id')(leaseId);
        if (opts.reason.length > 512)
          throw new LeaseError('INVALID_REQUEST', '--reason is longer than 512 characters');
        const view = await (await ctx.client()).revoke({
          leaseId: id,
          reason: 'admin',
          actor: opts.actor ?? defaultActor(io.env),
          detail: opts.reason,
        });
        ctx.print({ lease: view }, () => leasesTable([view]));
        return EXIT.ok;
      }),
    );

  try {
    await program.parseAsync([...argv], { from: 'user' });
  } catch (error) {
    if (error instanceof CommanderError) {
      if (
        error.code === 'commander.helpDisplayed' ||
        error.code === 'commander.version' ||
        error.code === 'commander.help'
      )
        return EXIT.ok;
      return EXIT.usage;
    }
    if (error instanceof InvalidArgumentError) {
      io.err(`leasectl: ${error.message}`);
      return EXIT.usage;
    }
    io.err(`leasectl: ${(error as Error).message}`);
    return EXIT.failed;
  }
  return code;
};

/** One command's connection, client and output mode. */
class Context {
  private nc: NatsConnection | undefined;
  private leaseClient: LeaseClient | undefined;
  constructor(
    readonly io: Io,
    readonly options: GlobalOptions,
  ) {}

  get json(): boolean {
    return this.options.json === true;
  }

  async connection(): Promise<NatsConnection> {
    if (this.nc) return this.nc;
    const servers = this.options.server ?? this.io.env.NATS_URL ?? DEFAULT_SERVER;
    try {
      this.nc = await connectBus({
        servers,
        name: 'leasectl',
        user: this.io.env.NATS_USER,
        pass: this.io.env.NATS_PASSWORD,
      });
    } catch (cause) {
      throw new LeaseError('UNAVAILABLE', `cannot connect to ${servers}: ${(cause as Error).message}`, {
        cause,
      });
    }
    return this.nc;
  }

  async client(): Promise<LeaseClient> {
    this.leaseClient ??= createLeaseClient({
      nc: await this.connection(),
      timeoutMs: Math.min(this.options.timeout, 60_000),
    });
    return this.leaseClient;
  }

  progress(): Progress | undefined {
    return this.io.errIsTTY ? new Progress(this.io) : undefined;
  }

  /** JSON (one document) or the human rendering. */
  print(json: unknown, human: () => string): void {
    this.io.out(this.json ? JSON.stringify(json) : human());
  }

  /** Prints a final error with its code; retryable codes exit 3, the others 1. */
  fail(error: LeaseError): ExitCode {
    this.io.err(`leasectl: ${error.code}: ${error.message}`);
    if (this.json) this.io.out(JSON.stringify({ ok: false, error: error.toJSON() }));
    return error.retryable ? EXIT.unavailable : EXIT.failed;
  }

  async close(): Promise<void> {
    await this.nc?.close().catch(() => undefined);
  }
}

// ---------------------------------------------------------------------------------------
// Commands

interface Replica {
  service: string;
  id: string;
  instance: string | undefined;
  version: string;
  ready: boolean | undefined;
  foldedSeq: number | undefined;
  lag: number | undefined;
}

const replicasOf = async (nc: NatsConnection, service: string, lastSeq: number): Promise<Replica[]> => {
  const client = new Svcm(nc).client({ strategy: 'timer', maxWait: SERVICE_DISCOVERY_MS });
  const instances = new Map<string, Replica>();
  try {
    await collectReplicas(client, service, lastSeq, instances);
  } catch (cause) {
    // No replica of this service runs: the request has no responders.
    if (!/no responders/i.test((cause as Error).message)) throw cause;
  }
  return [...instances.values()].sort((a, b) => (a.instance ?? a.id).localeCompare(b.instance ?? b.id));
};

const collectReplicas = async (
  client: ReturnType<Svcm['client']>,
  service: string,
  lastSeq: number,
  instances: Map<string, Replica>,
): Promise<void> => {
  // PING and STATS go out together: each waits SERVICE_DISCOVERY_MS for answers.
  const [pings, stats] = await Promise.all([client.ping(service), client.stats(service)]);
  for await (const identity of pings) {
    instances.set(identity.id, {
      service,
      id: identity.id,
      instance: identity.metadata?.instance,
      version: identity.version,
      ready: undefined,
      foldedSeq: undefined,
      lag: undefined,
    });
  }
  for await (const answer of stats) {
    const data = (answer.endpoints ?? [])
      .map((e) => e.data as Record<string, unknown> | undefined)
      .find((d) => d);
    const replica: Replica = instances.get(answer.id) ?? {
      service,
      id: answer.id,
      instance: undefined,
      version: answer.version,
      ready: undefined,
      foldedSeq: undefined,
      lag: undefined,
    };
    if (data && typeof data.foldedSeq === 'number') {
      replica.foldedSeq = data.foldedSeq;
      replica.lag = lastSeq - data.foldedSeq;
    }
    if (data && typeof data.ready === 'boolean') replica.ready = data.ready;
    instances.set(answer.id, replica);
  }
};

const status = async (ctx: Context): Promise<ExitCode> => {
  const nc = await ctx.connection();
  const lastSeq = await streamLastSeq(await jetstreamManager(nc));
  const replicas = (
    await Promise.all([
      replicasOf(nc, GATEWAY_SERVICE, lastSeq),
      replicasOf(nc, REPOSSESSOR_SERVICE, lastSeq),
    ])
  ).flat();
  let gatewayError: LeaseError | undefined;
  let limits: { limit: string; slotsMax: number; used: number; free: number; liveLeases: number }[] = [];
  try {
    const client = await ctx.client();
    const list = await client.listLimits();
    limits = await Promise.all(
      list.limits.map(async (limit) => ({
        ...limit,
        liveLeases: (await client.list({ limit: limit.limit, max: 1 })).total,
      })),
    );
  } catch (cause) {
    gatewayError = asLeaseError(cause);
  }
  ctx.print(
    {
      stream: { name: STREAM_NAME, lastSeq },
      limits,
      replicas,
      ...(gatewayError ? { gatewayError: gatewayError.toJSON() } : {}),
    },
    () =>
      [
        `stream ${STREAM_NAME}: last seq ${lastSeq}`,
        '',
        gatewayError
          ? `limits: the gateway did not answer (${gatewayError.code}: ${gatewayError.message})`
          : limitsTable(limits, new Map(limits.map((l) => [l.limit, String(l.liveLeases)]))),
        '',
        replicas.length === 0
          ? 'no gateway or repossessor replica answered'
          : table(
              ['SERVICE', 'INSTANCE', 'ID', 'VERSION', 'READY', 'FOLDED SEQ', 'LAG'],
              replicas.map((r) => [r.service, r.instance, r.id, r.version, r.ready, r.foldedSeq, r.lag]),
            ),
      ].join('\n'),
  );
  if (gatewayError) return ctx.fail(gatewayError);
  return EXIT.ok;
};

const limitsList = async (ctx: Context): Promise<ExitCode> => {
  const list = await (await ctx.client()).listLimits();
  ctx.print(list, () =>
    [
      limitsTable(list.limits),
      '',
      `requester limits: default ${list.defaultLeasesPerRequester}${Object.entries(list.requesterLimits)
        .map(([who, max]) => `, ${who} ${max}`)
        .join('')}`,
    ].join('\n'),
  );
  return EXIT.ok;
};

const leaseHistory = async (ctx: Context, leaseId: string): Promise<ExitCode> => {
  const nc = await ctx.connection();
  let view: LeaseView | undefined;
  let gatewayError: LeaseError | undefined;
  try {
    view = await (await ctx.client()).get({ leaseId });
  } catch (cause) {
    gatewayError = asLeaseError(cause);
  }
  // Its admission entries: the grant, and before it any queueing and end of wait, at most
  // a wait window earlier. A lease no gateway keeps is looked for from the start of the log.
  const progress = ctx.progress();
  const admission = await admissionHistory(nc, leaseId, {
    ...(view ? { from: new Date(view.grantedAtMs - WAIT_WINDOW_MS), throughSeq: view.grantSeq } : {}),
    ...(progress ? { onProgress: progress.tick } : {}),
  });
  progress?.finish();
  const grant = admission.find((entry) => entry.event?.type === 'LeasesGranted');
  const events = await leaseEvents(nc, leaseId);
  if (admission.length === 0 && events.length === 0) {
    return ctx.fail(
      gatewayError && gatewayError.code !== 'UNKNOWN_LEASE'
        ? gatewayError
        : new LeaseError('UNKNOWN_LEASE', `no lease ${leaseId} in the log`),
    );
  }
  if (gatewayError && gatewayError.code !== 'UNKNOWN_LEASE')
    ctx.io.err(`leasectl: the gateway did not answer (${gatewayError.code}); showing the log only`);
  const grantSeq = grant?.seq;
  const history = [...admission, ...events].map((entry) => ({
    seq: entry.seq,
    time: entry.time.toISOString(),
    subject: entry.subject,
    ...(entry.event
      ? {
          text: historyLine(entry.seq, entry.event, { leaseId, ...(grantSeq ? { grantSeq } : {}) }),
          event: entry.event,
        }
      : { problem: entry.problem }),
  }));
  ctx.print({ lease: view ?? null, history }, () =>
    [
      view ? leasesTable([view]) : `lease ${leaseId}: the gateway no longer keeps it (ended long ago)`,
      '',
      'history:',
      ...history.map((h) => ('text' in h ? h.text : `${h.time}  seq ${h.seq}  (undecodable: ${h.problem})`)),
    ].join('\n'),
  );
  return EXIT.ok;
};

const replay = async (ctx: Context, at: LogPoint, all: boolean): Promise<ExitCode> => {
  const progress = ctx.progress();
  const { state, lastTime } = await replayAt(await ctx.connection(), at, progress?.tick);
  progress?.finish();
  const leases = [...state.leases.values()]
    .filter((lease) => all || lease.status === 'live')
    .sort((a, b) => a.grantSeq - b.grantSeq)
    .map(leaseView);
  const limits = limitViews(state);
  ctx.print(
    {
      at: 'seq' in at ? { seq: at.seq } : { time: at.time.toISOString() },
      foldedSeq: state.lastSeq,
      foldedTime: lastTime?.toISOString() ?? null,
      limits,
      requesterLimits: Object.fromEntries(state.requesterLimits),
      defaultLeasesPerRequester: state.defaultLeasesMax,
      leases,
      liveLeases: state.liveCount,
      anomalyCount: state.anomalyCount,
    },
    () =>
      [
        `state at ${describePoint(at)}: folded up to seq ${state.lastSeq}${lastTime ? ` (${lastTime.toISOString()})` : ''}`,
        '',
        limitsTable(limits),
        '',
        leasesTable(leases),
        `${state.liveCount} live leases; ${state.anomalyCount} anomalies in the log up to here`,
      ].join('\n'),
  );
  return EXIT.ok;
};

const runAudit = async (ctx: Context, timeoutMs: number): Promise<ExitCode> => {
  const listed: AuditFinding[] = [];
  const progress = ctx.progress();
  const result = await audit(
    await ctx.connection(),
    (finding) => {
      if (ctx.json) {
        if (listed.length < AUDIT_FINDINGS_LISTED_MAX) listed.push(finding);
      } else {
        progress?.finish();
        ctx.io.out(formatFinding(finding));
      }
    },
    progress?.tick,
    timeoutMs,
  );
  progress?.finish();
  const { counts } = result;
  const ok = counts.findings === 0;
  const rate = counts.events / Math.max(0.001, result.elapsedMs / 1000);
  ctx.print(
    {
      ok,
      lastSeq: result.lastSeq,
      events: counts.events,
      undecodable: counts.undecodable,
      findingCount: counts.findings,
      byKind: counts.byKind,
      findings: listed,
      elapsedMs: Math.round(result.elapsedMs),
      eventsPerSecond: Math.round(rate),
    },
    () =>
      `audit ${ok ? 'passed' : 'FAILED'}: ${counts.events} events and ${counts.undecodable} undecodable messages up to seq ${result.lastSeq}, ` +
      `${counts.findings} violations${
        ok
          ? ''
          : ` (${Object.entries(counts.byKind)
              .map(([k, n]) => `${k} ${n}`)
              .join(', ')})`
      }, ` +
      `${Math.round(result.elapsedMs)} ms (${Math.round(rate).toLocaleString('en-US')} events/s)`,
  );
  return ok ? EXIT.ok : EXIT.failed;
};

interface TailOptions {
  from: string;
  count?: number;
  limit?: string;
  requester?: string;
  lease?: string;
  type?: LeaseEventType[];
}

const tail = async (ctx: Context, opts: TailOptions): Promise<ExitCode> => {
  const from =
    opts.from === 'now' || opts.from === 'start'
      ? opts.from
      : (() => {
          try {
            const point = parseLogPoint(opts.from);
            return 'seq' in point ? { seq: Math.max(1, point.seq) } : point;
          } catch (error) {
            throw new InvalidArgumentError(`--from: ${(error as Error).message}`);
          }
        })();
  const filter: EventFilter = {
    ...(opts.limit ? { limit: opts.limit } : {}),
    ...(opts.requester ? { requester: opts.requester } : {}),
    ...(opts.lease ? { leaseId: opts.lease } : {}),
    ...(opts.type ? { types: opts.type } : {}),
  };
  const subscription = await subscribe(await ctx.connection(), {
    from,
    filter,
    pullWaitMs: 1_000,
    onProblem: (p) =>
      ctx.io.err(`leasectl: seq ${p.seq} on ${p.subject} skipped (${p.problem}): ${p.message}`),
  });
  const onInterrupt = () => void subscription.close();
  ctx.io.interrupt?.addEventListener('abort', onInterrupt, { once: true });
  let seen = 0;
  try {
    if (ctx.io.interrupt?.aborted) return EXIT.ok;
    for await (const item of subscription) {
      ctx.io.out(
        ctx.json
          ? JSON.stringify({
              seq: item.seq,
              time: item.time.toISOString(),
              subject: item.subject,
              event: item.event,
            })
          : tailLine(item.seq, item.time, item.event),
      );
      seen += 1;
      if (opts.count !== undefined && seen >= opts.count) break;
    }
  } finally {
    ctx.io.interrupt?.removeEventListener('abort', onInterrupt);
    await subscription.close();
  }
  return EXIT.ok;
};

const exportLog = async (
  ctx: Context,
  opts: { from?: LogPoint; to?: LogPoint; format: 'jsonl' | 'csv' },
): Promise<ExitCode> => {
  const progress = ctx.progress();
  let skipped = 0;
  if (opts.format === 'csv') ctx.io.out(EXPORT_CSV_HEADER.join(','));
  for await (const item of readLog(await ctx.connection(), {
    ...(opts.from ? { from: opts.from } : {}),
    ...(opts.to ? { to: opts.to } : {}),
    ...(progress ? { onProgress: progress.tick } : {}),
  })) {
    if (!item.event) {
      skipped += 1;
      ctx.io.err(`leasectl: seq ${item.seq} on ${item.subject} skipped (${item.problem})`);
      continue;
    }
    ctx.io.out(
      opts.format === 'csv'
        ? exportCsvRow(item.seq, item.time, item.subject, item.event)
        : JSON.stringify({
            seq: item.seq,
            time: item.time.toISOString(),
            subject: item.subject,
            event: item.event,
          }),
    );
  }
  progress?.finish();
  if (skipped > 0) ctx.io.err(`leasectl: ${skipped} undecodable messages were not exported`);
  return EXIT.ok;
};
