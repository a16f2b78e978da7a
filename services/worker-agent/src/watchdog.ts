import { type ChildProcess, type StdioOptions, spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { terminateGroup } from './process-group.js';
import {
  encodeLine,
  type FromWatchdog,
  lineReader,
  type TerminatedBy,
  type ToWatchdog,
} from './watchdog-protocol.js';

/**
 * The watchdog: a small process the agent starts once and talks to over a pipe (ADR 0008).
 * It is the parent of every workload and the owner of their process groups, and it kills a
 * group when
 * - the agent tells it to (the lease is lost),
 * - the local deadline the agent last wrote for that workload passes (the agent is alive
 *   but stuck: a blocked event loop, a stopped process), or
 * - its stdin closes: the agent died (kill -9 included), and nobody renews any more.
 * It has nothing else to do, so nothing else can delay it. It is started detached, in a
 * session of its own, so that a terminal's Ctrl-C reaches the agent (which then stops its
 * workloads in order) and not the watchdog.
 */

const TIMER_DELAY_MAX_MS = 2 ** 31 - 1;
/** The agent passes its own stdout as fd 3, for workloads whose output is inherited. */
const AGENT_STDOUT_FD = 3;

interface Entry {
  readonly id: string;
  readonly child: ChildProcess;
  readonly pgid: number;
  readonly graceMs: number;
  deadlineAtMs: number;
  /** How long before the deadline the group's ending starts. */
  leadMs: number;
  timer: ReturnType<typeof setTimeout> | undefined;
  terminatedBy: TerminatedBy | null;
  /** The group's termination (on loss, or the cleanup of leftovers after the leader exited). */
  ending: Promise<{ killed: boolean; gone: boolean }> | undefined;
  exit: { code: number | null; signal: string | null } | undefined;
}

const entries = new Map<string, Entry>();
let agentGone = false;

process.stdout.on('error', () => {
  // EPIPE once the agent is gone: there is nobody left to report to, and that is fine.
});
const send = (message: FromWatchdog) => {
  // Also after the agent is gone: its pipe may still be read (close() waits for these lines).
  if (!process.stdout.writable) return;
  process.stdout.write(encodeLine(message));
};
const warn = (text: string) => process.stderr.write(`lease-agent watchdog ${process.pid}: ${text}\n`);

const maybeExit = () => {
  if (agentGone && entries.size === 0) process.exit(0);
};

/** Ends the group once: SIGTERM, SIGKILL after the grace, then waits until it is empty. */
const endGroup = (entry: Entry, by: TerminatedBy | null) => {
  clearTimeout(entry.timer);
  entry.timer = undefined;
  if (by && entry.terminatedBy === null && entry.exit === undefined) entry.terminatedBy = by;
  entry.ending ??= terminateGroup(entry.pgid, entry.graceMs);
  void entry.ending.then((result) => finish(entry, result));
};

/** Reports the workload once both its own process has exited and its group is empty. */
const finish = (entry: Entry, result: { killed: boolean; gone: boolean }) => {
  if (entry.exit === undefined || !entries.has(entry.id)) return;
  entries.delete(entry.id);
  send({
    t: 'exited',
    id: entry.id,
    code: entry.exit.code,
    signal: entry.exit.signal,
    terminatedBy: entry.terminatedBy,
    killed: result.killed,
    gone: result.gone,
    goneAtMs: Date.now(),
  });
  maybeExit();
};

const leadFor = (graceMs: number, remainingMs: number): number =>
  Math.max(0, Math.min(graceMs, Math.floor(remainingMs / 2)));

/** The deadline is checked on the clock, not trusted to one timer (timers may fire early). */
const armDeadline = (entry: Entry) => {
  clearTimeout(entry.timer);
  entry.timer = undefined;
  if (entry.ending) return;
  // SIGTERM goes out a grace before the local deadline, so that the SIGKILL after the grace
  // lands by the deadline itself, which is before anyone can revoke the lease (ADR 0003).
  // A lease shorter than two graces starts at half its remaining time instead.
  const leftMs = entry.deadlineAtMs - entry.leadMs - performance.now();
  if (leftMs <= 0) return endGroup(entry, 'deadline');
  entry.timer = setTimeout(() => armDeadline(entry), Math.min(Math.ceil(leftMs), TIMER_DELAY_MAX_MS));
};

const stdioFor = (
  output: Extract<ToWatchdog, { t: 'spawn' }>['output'],
): { stdio: StdioOptions; fd?: number } => {
  switch (output.kind) {
    case 'inherit':
      return { stdio: ['ignore', AGENT_STDOUT_FD, 'inherit'] };
    case 'file': {
      const fd = openSync(output.path, 'a', 0o600);
      return { stdio: ['ignore', fd, fd], fd };
    }
    case 'ignore':
      return { stdio: 'ignore' };
  }
};

const startWorkload = (command: Extract<ToWatchdog, { t: 'spawn' }>) => {
  const { id } = command;
  if (entries.has(id)) return send({ t: 'spawn-failed', id, message: `workload ${id} already runs` });
  if (!(command.remainingMs > 0))
    return send({ t: 'spawn-failed', id, message: 'the lease is already past its local deadline' });
  const deadlineAtMs = performance.now() + command.remainingMs;
  let child: ChildProcess;
  let fd: number | undefined;
  try {
    const io = stdioFor(command.output);
    fd = io.fd;
    // detached: setsid, so the workload leads a new process group (and session) whose id is
    // its pid; shell: false, so no argument is ever read by a shell.
    child = spawn(command.command, [...command.args], {
      env: { ...command.env },
      ...(command.cwd ? { cwd: command.cwd } : {}),
      detached: true,
      shell: false,
      stdio: io.stdio,
    });
  } catch (error) {
    return send({ t: 'spawn-failed', id, message: (error as Error).message });
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
  const pid = child.pid;
  if (pid === undefined) {
    child.once('error', (error) => send({ t: 'spawn-failed', id, message: error.message }));
    return;
  }
  const entry: Entry = {
    id,
    child,
    pgid: pid,
    graceMs: Math.max(0, command.graceMs),
    deadlineAtMs,
    leadMs: leadFor(command.graceMs, command.remainingMs),
    timer: undefined,
    terminatedBy: null,
    ending: undefined,
    exit: undefined,
  };
  entries.set(id, entry);
  child.on('error', (error) => warn(`workload ${id}: ${error.message}`));
  child.once('exit', (code, signal) => {
    entry.exit = { code, signal };
    // Whatever the workload left behind in its group has no lease once it is reported: end it too.
    endGroup(entry, null);
  });
  send({ t: 'started', id, pid });
  armDeadline(entry);
  // The agent may already be gone (it died while this line was in the pipe).
  if (agentGone) endGroup(entry, 'agent-gone');
};

const onMessage = (raw: unknown) => {
  if (typeof raw !== 'object' || raw === null || typeof (raw as { t?: unknown }).t !== 'string')
    return warn('ignored a message without a type');
  const message = raw as ToWatchdog;
  switch (message.t) {
    case 'spawn':
      return startWorkload(message);
    case 'deadline': {
      const entry = entries.get(message.id);
      if (!entry || entry.ending || !(message.remainingMs > 0)) return;
      entry.deadlineAtMs = performance.now() + message.remainingMs;
      entry.leadMs = leadFor(entry.graceMs, message.remainingMs);
      return armDeadline(entry);
    }
    case 'kill': {
      const entry = entries.get(message.id);
      if (entry) endGroup(entry, 'kill');
      return;
    }
    default:
      return warn(`ignored a message of unknown type ${(message as { t: string }).t}`);
  }
};

const onAgentGone = () => {
  if (agentGone) return;
  agentGone = true;
  for (const entry of entries.values()) endGroup(entry, 'agent-gone');
  maybeExit();
};

process.stdin.on(
  'data',
  lineReader(onMessage, (line) => warn(`ignored a line that is not JSON: ${line}`)),
);
process.stdin.once('end', onAgentGone);
process.stdin.once('close', onAgentGone);
process.stdin.once('error', onAgentGone);
for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(signal, onAgentGone);

send({ t: 'ready', pid: process.pid });
