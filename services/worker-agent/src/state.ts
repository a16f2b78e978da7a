import { mkdir, open, readdir, readFile, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';

/**
 * The agent's state dir (AGENT_STATE_DIR), what a restarted agent needs to clean up after
 * the one that died (ADR 0008):
 *
 *   runs/<runId>.json   one per workload: lease id, holder secret, process group. Written
 *                       before the acquire is sent (the lease id and secret are chosen
 *                       here), so no lease can exist that the agent could not release.
 *   logs/<runId>.log    the workload's stdout and stderr (daemon mode)
 *   draining            present while the agent is draining
 *
 * Files are written to a temporary name, fsynced and renamed, so a crash leaves the old
 * record or the new one, never half of one. The holder secrets make the folder sensitive:
 * it is created 0700 and its files 0600.
 */

export const RunRecordV1 = z.object({
  v: z.literal(1),
  runId: z.string(),
  leaseId: z.string(),
  holderSecret: z.string(),
  requester: z.string(),
  job: z.string().nullable(),
  /** acquiring: the acquire may or may not have been granted; running: the workload was started. */
  phase: z.enum(['acquiring', 'running']),
  /** The workload's pid, which is its process group id. */
  pgid: z.number().int().positive().optional(),
  /** The group leader's start time (/proc, clock ticks): tells it from a later process with the same pid. */
  startTicks: z.number().int().nonnegative().optional(),
  idempotencyKey: z.string().optional(),
  createdAtMs: z.number().int(),
});
export type RunRecord = z.infer<typeof RunRecordV1>;

const DrainFileV1 = z.object({ draining: z.literal(true), sinceMs: z.number().int() });

export interface StateDir {
  readonly dir: string;
  writeRun(record: RunRecord): Promise<void>;
  removeRun(runId: string): Promise<void>;
  /** Every readable record; unreadable files are reported through onBad and skipped. */
  listRuns(onBad?: (file: string, problem: string) => void): Promise<RunRecord[]>;
  logPath(runId: string): string;
  draining(): Promise<boolean>;
  setDraining(draining: boolean): Promise<void>;
}

const writeAtomic = async (path: string, text: string) => {
  const temporary = `${path}.${process.pid}.tmp`;
  const file = await open(temporary, 'w', 0o600);
  try {
    await file.writeFile(text);
    await file.sync();
  } finally {
    await file.close();
  }
  await rename(temporary, path);
};

/** The rename itself is durable only once the folder is synced. */
const syncDir = async (dir: string) => {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
};

export const openStateDir = async (dir: string): Promise<StateDir> => {
  const runsDir = join(dir, 'runs');
  const logsDir = join(dir, 'logs');
  await mkdir(runsDir, { recursive: true, mode: 0o700 });
  await mkdir(logsDir, { recursive: true, mode: 0o700 });
  const drainPath = join(dir, 'draining');
  const runPath = (runId: string) => join(runsDir, `${runId}.json`);
  return {
    dir,
    async writeRun(record) {
      await writeAtomic(runPath(record.runId), JSON.stringify(record));
      await syncDir(runsDir);
    },
    async removeRun(runId) {
      await rm(runPath(runId), { force: true });
    },
    async listRuns(onBad) {
      const records: RunRecord[] = [];
      for (const file of await readdir(runsDir)) {
        if (!file.endsWith('.json')) continue;
        try {
          const parsed = RunRecordV1.safeParse(JSON.parse(await readFile(join(runsDir, file), 'utf8')));
          if (parsed.success) records.push(parsed.data);
          else onBad?.(file, parsed.error.issues[0]?.message ?? 'invalid');
        } catch (error) {
          onBad?.(file, (error as Error).message);
        }
      }
      return records;
    },
    logPath: (runId) => join(logsDir, `${runId}.log`),
    async draining() {
      try {
        return DrainFileV1.safeParse(JSON.parse(await readFile(drainPath, 'utf8'))).success;
      } catch {
        return false;
      }
    },
    async setDraining(draining) {
      if (draining) await writeAtomic(drainPath, JSON.stringify({ draining: true, sinceMs: Date.now() }));
      else await rm(drainPath, { force: true });
      await syncDir(dir);
    },
  };
};
