import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

/**
 * The services as real processes, for the end-to-end tier: the built entry points
 * (`npm test` builds first), each with its own environment. Every process is killed when
 * the test process exits, even after a failure, so a red run leaves nothing behind.
 */
const root = join(import.meta.dirname, '../..');
export type ServiceName = 'gateway' | 'repossessor' | 'worker-agent';

const alive = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of alive) child.kill('SIGKILL');
});

export interface ServiceProcess {
  readonly name: ServiceName;
  readonly pid: number | undefined;
  /** Everything the process wrote, for assertions and for the failure message. */
  output(): string;
  /** Resolves once a log line contains `text` (bounded). */
  waitForOutput(text: string, timeoutMs?: number): Promise<void>;
  kill9(): Promise<void>;
  stop(): Promise<void>;
  /** Starts it again with the same environment. */
  restart(): Promise<void>;
}

export const startService = async (
  name: ServiceName,
  env: Record<string, string>,
  options: { waitFor?: string; timeoutMs?: number } = {},
): Promise<ServiceProcess> => {
  const entry = join(root, 'services', name, 'dist', 'main.js');
  if (!existsSync(entry)) throw new Error(`${entry} is missing: run npm test (or npx tsc -b) first`);
  let child: ChildProcess;
  let output = '';
  let exited: Promise<void>;

  const launch = async () => {
    output = '';
    child = spawn(process.execPath, [entry], {
      env: { ...process.env, LOG_LEVEL: 'info', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    alive.add(child);
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.stderr!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    exited = new Promise((resolve) => {
      child.once('exit', () => {
        alive.delete(child);
        resolve();
      });
    });
    await handle.waitForOutput(options.waitFor ?? 'ready', options.timeoutMs ?? 20_000);
  };

  const handle: ServiceProcess = {
    name,
    get pid() {
      return child?.pid;
    },
    output: () => output,
    async waitForOutput(text, timeoutMs = 20_000) {
      const deadline = Date.now() + timeoutMs;
      while (!output.includes(text)) {
        if (child.exitCode !== null)
          throw new Error(`${name} exited (${child.exitCode}) before "${text}":\n${output}`);
        if (Date.now() > deadline)
          throw new Error(`${name} did not print "${text}" within ${timeoutMs} ms:\n${output}`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    },
    async kill9() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
    },
    async restart() {
      await handle.stop();
      await launch();
    },
  };
  await launch();
  return handle;
};
