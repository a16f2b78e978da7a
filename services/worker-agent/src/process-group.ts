import { existsSync, readdirSync, readFileSync } from 'node:fs';

/**
 * Process groups, as the watchdog and the start-up reconcile see them. A workload is
 * spawned detached (setsid), so it leads a process group of its own whose id is its pid,
 * and everything it forks stays in that group unless it calls setsid/setpgid itself.
 *
 * "Alive" means running: a zombie (state Z) is a process that has exited and is only
 * waiting for its parent to read its status. Orphans are reparented to PID 1, and not
 * every PID 1 reaps (a container's often does not), so an orphaned grandchild can stay a
 * zombie for ever; it holds no resources but a pid, and kill(pid, 0) still succeeds on it.
 */

/** Polls while waiting for a group to empty. */
export const GROUP_POLL_MS = 10;
/** After SIGKILL, how long to wait for the kernel to tear the group down before giving up the wait. */
export const KILL_WAIT_MS = 2_000;

const PROC = '/proc';
const hasProc = (): boolean => existsSync(`${PROC}/self/stat`);

export interface ProcStat {
  readonly pid: number;
  /** R, S, D, T, Z, X, ... */
  readonly state: string;
  readonly ppid: number;
  readonly pgid: number;
  /** Clock ticks after boot: with the pid, it names one process for ever (pids are reused). */
  readonly startTicks: number;
}

/** /proc/<pid>/stat, parsed; undefined when there is no such process (or no /proc). */
export const procStat = (pid: number): ProcStat | undefined => {
  let text: string;
  try {
    text = readFileSync(`${PROC}/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // The command name (field 2) is in parentheses and may itself contain spaces and ')'.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return {
    pid,
    state: fields[0] ?? '?',
    ppid: Number(fields[1]),
    pgid: Number(fields[2]),
    startTicks: Number(fields[19]),
  };
};

const isGone = (state: string) => state === 'Z' || state === 'X';

/** True while the process runs (a zombie does not). */
export const isRunning = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ESRCH') return false;
  }
  const stat = procStat(pid);
  return stat === undefined ? !hasProc() : !isGone(stat.state);
};

/** The running members of a process group (Linux: from /proc), or undefined where /proc is missing. */
export const groupMembers = (pgid: number): number[] | undefined => {
  if (!hasProc()) return undefined;
  const members: number[] = [];
  for (const entry of readdirSync(PROC)) {
    const pid = Number(entry);
    if (!Number.isInteger(pid) || pid <= 0) continue;
    const stat = procStat(pid);
    if (stat && stat.pgid === pgid && !isGone(stat.state)) members.push(pid);
  }
  return members;
};

/** True while any process of the group runs. */
export const groupAlive = (pgid: number): boolean => {
  try {
    process.kill(-pgid, 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ESRCH') return false;
  }
  const members = groupMembers(pgid);
  return members === undefined ? true : members.length > 0;
};

/** Sends a signal to every process of the group; false when the group no longer exists. */
export const signalGroup = (pgid: number, signal: NodeJS.Signals): boolean => {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch {
    return false;
  }
};

/** Counts the running members of each of the given groups in one pass over /proc. */
const runningCounts = (pgids: ReadonlySet<number>): Map<number, number> | undefined => {
  if (!hasProc()) return undefined;
  const counts = new Map<number, number>();
  for (const entry of readdirSync(PROC)) {
    const pid = Number(entry);
    if (!Number.isInteger(pid) || pid <= 0) continue;
    const stat = procStat(pid);
    if (stat && pgids.has(stat.pgid) && !isGone(stat.state))
      counts.set(stat.pgid, (counts.get(stat.pgid) ?? 0) + 1);
  }
  return counts;
};

export interface Termination {
  /** SIGKILL was needed: the group outlived the grace after SIGTERM. */
  readonly killed: boolean;
  /** The group is empty (false only if it survived SIGKILL for KILL_WAIT_MS). */
  readonly gone: boolean;
}

interface Ending {
  readonly pgid: number;
  readonly killAtMs: number;
  giveUpAtMs: number;
  killed: boolean;
  readonly resolve: (result: Termination) => void;
}

/**
 * Ends process groups: SIGTERM at once, SIGKILL to what is left after the grace, done when
 * no member runs. One poll loop serves every group being ended, with one pass over /proc
 * per tick however many there are, so that ending 500 workloads at once (NATS down, agent
 * stopping) costs 500 signals and a few scans, not 500 scans per tick; and the SIGTERM of
 * the last group is not queued behind the others' waits.
 */
const endings = new Map<number, Ending>();
const pending = new Map<number, Promise<Termination>>();
let tickScheduled = false;
const scheduleTick = (delayMs: number) => {
  if (tickScheduled) return;
  tickScheduled = true;
  setTimeout(tick, delayMs);
};

const tick = () => {
  tickScheduled = false;
  const nowMs = performance.now();
  // A group that no longer exists at all needs no scan.
  const alive = new Set<number>();
  for (const ending of endings.values()) {
    try {
      process.kill(-ending.pgid, 0);
      alive.add(ending.pgid);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ESRCH') alive.add(ending.pgid);
    }
  }
  const counts = alive.size > 0 ? runningCounts(alive) : new Map<number, number>();
  for (const ending of [...endings.values()]) {
    const running = alive.has(ending.pgid) && (counts === undefined || (counts.get(ending.pgid) ?? 0) > 0);
    if (!running) {
      finishEnding(ending, true);
    } else if (!ending.killed && nowMs >= ending.killAtMs) {
      ending.killed = true;
      ending.giveUpAtMs = nowMs + KILL_WAIT_MS;
      signalGroup(ending.pgid, 'SIGKILL');
    } else if (ending.killed && nowMs >= ending.giveUpAtMs) {
      finishEnding(ending, false);
    }
  }
  if (endings.size > 0) scheduleTick(GROUP_POLL_MS);
};

const finishEnding = (ending: Ending, gone: boolean) => {
  endings.delete(ending.pgid);
  pending.delete(ending.pgid);
  ending.resolve({ killed: ending.killed, gone });
};

/** SIGTERM to the whole group now, SIGKILL to what is left after `graceMs`; resolves once it is empty. */
export const terminateGroup = (pgid: number, graceMs: number): Promise<Termination> => {
  const already = pending.get(pgid);
  if (already) return already;
  if (!signalGroup(pgid, 'SIGTERM')) return Promise.resolve({ killed: false, gone: true });
  const promise = new Promise<Termination>((resolve) => {
    const nowMs = performance.now();
    endings.set(pgid, {
      pgid,
      killAtMs: nowMs + Math.max(0, graceMs),
      giveUpAtMs: Number.POSITIVE_INFINITY,
      killed: false,
      resolve,
    });
  });
  pending.set(pgid, promise);
  // The first check comes soon: most groups are gone within a millisecond of SIGTERM.
  scheduleTick(1);
  return promise;
};
