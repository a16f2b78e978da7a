/**
 * The line protocol between the agent and its watchdog (ADR 0008): one JSON object per
 * line, agent -> watchdog on the watchdog's stdin, watchdog -> agent on its stdout. Both
 * ends are built from the same package, so the types are the contract; the watchdog still
 * ignores a line it cannot read rather than crash.
 *
 * Deadlines cross the pipe as *remaining* milliseconds, never as clock readings: the two
 * processes' monotonic clocks have different origins, and a duration measured just before
 * the write is the only thing both can agree on. The watchdog's deadline is therefore the
 * agent's plus the pipe's latency (microseconds, or a little more on a loaded host).
 */

/** Where a workload's stdout and stderr go. */
export type OutputSpec =
  /** The agent's own stdout/stderr (the one-shot mode): the watchdog passes on fds 3 and 2. */
  | { readonly kind: 'inherit' }
  /** Appended to a file (the daemon: one log per run in the state dir). */
  | { readonly kind: 'file'; readonly path: string }
  | { readonly kind: 'ignore' };

export type ToWatchdog =
  | {
      readonly t: 'spawn';
      readonly id: string;
      readonly command: string;
      readonly args: readonly string[];
      readonly env: Readonly<Record<string, string>>;
      readonly cwd?: string;
      readonly output: OutputSpec;
      /** The lease's local deadline, as milliseconds left when the agent wrote this line. */
      readonly remainingMs: number;
      /** SIGKILL follows SIGTERM after this long. */
      readonly graceMs: number;
    }
  /** A renewal was confirmed: the new local deadline, as milliseconds left. */
  | { readonly t: 'deadline'; readonly id: string; readonly remainingMs: number }
  /** The lease is lost (or the agent stops): terminate the group now. */
  | { readonly t: 'kill'; readonly id: string; readonly reason: string };

export type TerminatedBy =
  /** The agent said so (lease lost, agent stopping). */
  | 'kill'
  /** The watchdog's own copy of the local deadline passed (agent alive but stuck). */
  | 'deadline'
  /** The pipe to the agent closed: the agent died. */
  | 'agent-gone';

export type FromWatchdog =
  | { readonly t: 'ready'; readonly pid: number }
  | { readonly t: 'started'; readonly id: string; readonly pid: number }
  | { readonly t: 'spawn-failed'; readonly id: string; readonly message: string }
  | {
      readonly t: 'exited';
      readonly id: string;
      /** The workload's own process (the group leader): its exit code or signal. */
      readonly code: number | null;
      readonly signal: string | null;
      /** Set when the watchdog terminated the group; null when the workload ended by itself. */
      readonly terminatedBy: TerminatedBy | null;
      /** SIGKILL was needed after the grace. */
      readonly killed: boolean;
      /** Wall clock when the last process of the group was seen gone (for figures and outcomes). */
      readonly goneAtMs: number;
      /** False only if the group survived SIGKILL for the whole wait (a process in uninterruptible sleep). */
      readonly gone: boolean;
    };

export const encodeLine = (message: ToWatchdog | FromWatchdog): string => `${JSON.stringify(message)}\n`;

/** Splits a byte stream into lines and parses each; a line that is not JSON is passed to onBad. */
export const lineReader = (onMessage: (message: unknown) => void, onBad: (line: string) => void) => {
  let partial = '';
  return (chunk: Buffer | string) => {
    partial += chunk.toString();
    const lines = partial.split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) {
      if (line.trim() === '') continue;
      let message: unknown;
      try {
        message = JSON.parse(line);
      } catch {
        onBad(line);
        continue;
      }
      onMessage(message);
    }
  };
};
