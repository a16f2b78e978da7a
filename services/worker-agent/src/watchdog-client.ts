import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Logger } from 'pino';
import { terminateGroup } from './process-group.js';
import {
  encodeLine,
  type FromWatchdog,
  lineReader,
  type TerminatedBy,
  type ToWatchdog,
} from './watchdog-protocol.js';

/** The agent's side of the watchdog (ADR 0008). */

/** The watchdog answers `ready` within this long of being started, or the agent gives up. */
export const WATCHDOG_READY_TIMEOUT_MS = 10_000;
/** close() waits this long for the watchdog to end its groups and exit (plus the kill grace). */
export const WATCHDOG_EXIT_WAIT_MS = 5_000;

export const watchdogScript = (): string => fileURLToPath(new URL('./watchdog.js', import.meta.url));

/** What the agent asks the watchdog to start: the protocol's spawn message, without its tag. */
export type SpawnSpec = Omit<Extract<ToWatchdog, { t: 'spawn' }>, 't'>;

export interface ExitReport {
  readonly code: number | null;
  readonly signal: string | null;
  /** Who ended it; null when it ended by itself. `watchdog-lost`: the watchdog died and the agent ended the group. */
  readonly terminatedBy: TerminatedBy | 'watchdog-lost' | null;
  readonly killed: boolean;
  readonly gone: boolean;
  readonly goneAtMs: number;
}

export interface SpawnedWorkload {
  readonly pid: number;
  readonly exited: Promise<ExitReport>;
}

export interface Watchdog {
  readonly pid: number;
  /** False once the watchdog process has exited. */
  readonly alive: boolean;
  /**
   * Starts a workload in a process group of its own; resolves its pid (= its process group
   * id) and a promise of its end, which settles once the workload and its whole group are gone.
   */
  spawn(spec: SpawnSpec): Promise<SpawnedWorkload>;
  /** A confirmed renewal: the new local deadline, as milliseconds left now. */
  deadline(id: string, remainingMs: number): void;
  /** Terminates the workload's group (SIGTERM, SIGKILL after the grace). */
  kill(id: string, reason: string): void;
  /** Closes the pipe: the watchdog ends whatever still runs and exits. Bounded. */
  close(): Promise<void>;
}

interface Pending {
  readonly spec: SpawnSpec;
  resolveStart: (pid: number) => void;
  rejectStart: (error: Error) => void;
  pid: number | undefined;
  resolveExit: (report: ExitReport) => void;
}

export const startWatchdog = async (options: { readonly logger: Logger }): Promise<Watchdog> => {
  const { logger } = options;
  // fd 3 of the watchdog is this process's stdout, for workloads whose output is inherited.
  const child: ChildProcess = spawn(process.execPath, [watchdogScript()], {
    detached: true,
    stdio: ['pipe', 'pipe', 'inherit', 1],
  });
  const pending = new Map<string, Pending>();
  let alive = true;
  let closing = false;
  let onReady: ((pid: number) => void) | undefined;
  const exitedProcess = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.stdin!.on('error', () => {
    // EPIPE when the watchdog died: handled by the 'exit' listener below.
  });

  const onMessage = (raw: unknown) => {
    const message = raw as FromWatchdog;
    if (message.t === 'ready') return onReady?.(message.pid);
    const entry = pending.get(message.id);
    if (!entry) return;
    switch (message.t) {
      case 'started':
        entry.pid = message.pid;
        return entry.resolveStart(message.pid);
      case 'spawn-failed':
        pending.delete(message.id);
        return entry.rejectStart(new Error(`could not start ${entry.spec.command}: ${message.message}`));
      case 'exited':
        pending.delete(message.id);
        return entry.resolveExit({
          code: message.code,
          signal: message.signal,
          terminatedBy: message.terminatedBy,
          killed: message.killed,
          gone: message.gone,
          goneAtMs: message.goneAtMs,
        });
    }
  };
  child.stdout!.on(
    'data',
    lineReader(onMessage, (line) => logger.warn({ line }, 'unreadable line from the watchdog')),
  );

  /**
   * The watchdog died (it should not: it is killed only with the agent). Its workloads are
   * now nobody's children; the agent knows their groups and ends them itself.
   */
  void exitedProcess.then(async () => {
    alive = false;
    if (!closing) logger.error({ watchdog: child.pid }, 'the watchdog exited: ending its workloads');
    const left = [...pending.values()];
    pending.clear();
    await Promise.all(
      left.map(async (entry) => {
        if (entry.pid === undefined) return entry.rejectStart(new Error('the watchdog exited'));
        const result = await terminateGroup(entry.pid, entry.spec.graceMs);
        entry.resolveExit({
          code: null,
          signal: null,
          terminatedBy: 'watchdog-lost',
          killed: result.killed,
          gone: result.gone,
          goneAtMs: Date.now(),
        });
      }),
    );
  });

  const readyPid = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the watchdog did not start within ${WATCHDOG_READY_TIMEOUT_MS} ms`));
    }, WATCHDOG_READY_TIMEOUT_MS);
    onReady = (pid) => {
      clearTimeout(timer);
      resolve(pid);
    };
    void exitedProcess.then(() => {
      clearTimeout(timer);
      reject(new Error('the watchdog exited before it was ready'));
    });
  });

  const write = (line: string) => {
    if (alive && child.stdin?.writable) child.stdin.write(line);
  };

  return {
    pid: readyPid,
    get alive() {
      return alive;
    },
    spawn(spec) {
      if (!alive) return Promise.reject(new Error('the watchdog is not running'));
      if (pending.has(spec.id)) return Promise.reject(new Error(`workload ${spec.id} already exists`));
      let resolveStart!: (pid: number) => void;
      let rejectStart!: (error: Error) => void;
      let resolveExit!: (report: ExitReport) => void;
      const started = new Promise<number>((resolve, reject) => {
        resolveStart = resolve;
        rejectStart = reject;
      });
      const exited = new Promise<ExitReport>((resolve) => {
        resolveExit = resolve;
      });
      pending.set(spec.id, { spec, resolveStart, rejectStart, resolveExit, pid: undefined });
      write(encodeLine({ t: 'spawn', ...spec }));
      return started.then((pid) => ({ pid, exited }));
    },
    deadline(id, remainingMs) {
      if (pending.has(id)) write(encodeLine({ t: 'deadline', id, remainingMs: Math.floor(remainingMs) }));
    },
    kill(id, reason) {
      if (pending.has(id)) write(encodeLine({ t: 'kill', id, reason }));
    },
    async close() {
      closing = true;
      child.stdin?.end();
      const graceMs = Math.max(0, ...[...pending.values()].map((entry) => entry.spec.graceMs));
      let timer: ReturnType<typeof setTimeout> | undefined;
      const timedOut = new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(true), WATCHDOG_EXIT_WAIT_MS + graceMs);
      });
      const late = await Promise.race([exitedProcess.then(() => false), timedOut]);
      clearTimeout(timer);
      if (late) {
        logger.error({ watchdog: child.pid }, 'the watchdog did not exit: killing it');
        child.kill('SIGKILL');
        await exitedProcess;
      }
    },
  };
};
