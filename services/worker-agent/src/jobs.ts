import { readFileSync } from 'node:fs';
import { isAbsolute } from 'node:path';
import { z } from 'zod';
import { type AgentErrorBody, agentError, type RunRequest } from './protocol.js';

/**
 * What an agent may run (AGENT_JOBS_FILE): named jobs, each a command with its own fixed
 * arguments, the arguments a request may add, and its environment; and a list of commands
 * a request may name directly. Nothing else runs. A request's fields become an argv array
 * and are never read by a shell; the environment comes from this file, never from a
 * request.
 */

const AbsolutePath = z.string().min(1).refine(isAbsolute, 'must be an absolute path');
const JobName = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/);
/** A pattern is matched against a whole argument: it is anchored here, whatever it says. */
const Pattern = z.string().refine((source) => {
  try {
    new RegExp(source);
    return true;
  } catch {
    return false;
  }
}, 'not a valid regular expression');

export const JobV1 = z.strictObject({
  command: AbsolutePath,
  /** Always passed first. */
  args: z.array(z.string()).default([]),
  /** Arguments a request may add, verbatim ... */
  allowedArgs: z.array(z.string()).default([]),
  /** ... or matching one of these (whole-argument match). */
  argPatterns: z.array(Pattern).default([]),
  /** The most arguments a request may add. */
  argsMax: z.number().int().min(0).max(256).default(16),
  /** The workload's whole environment besides PATH and the LEASE_* variables. */
  env: z.record(z.string(), z.string()).default({}),
  cwd: AbsolutePath.optional(),
});

export const JobsFileV1 = z.strictObject({
  jobs: z.record(JobName, JobV1).default({}),
  /** Commands a request may name directly, with any arguments. Absolute paths, compared exactly. */
  allowCommands: z.array(AbsolutePath).default([]),
  /** Environment of allowlisted commands. */
  env: z.record(z.string(), z.string()).default({}),
});
export type JobsFile = z.infer<typeof JobsFileV1>;

export const EMPTY_JOBS: JobsFile = { jobs: {}, allowCommands: [], env: {} };

export const loadJobsFile = (path: string | undefined): JobsFile => {
  if (path === undefined) return EMPTY_JOBS;
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'));
  } catch (error) {
    throw new Error(`jobs file ${path}: ${(error as Error).message}`);
  }
  const parsed = JobsFileV1.safeParse(raw);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`);
    throw new Error(`jobs file ${path} is invalid: ${problems.join('; ')}`);
  }
  return parsed.data;
};

export interface ResolvedWorkload {
  readonly job: string | null;
  readonly command: string;
  readonly args: readonly string[];
  readonly env: Readonly<Record<string, string>>;
  readonly cwd?: string;
}

const DEFAULT_PATH = '/usr/local/bin:/usr/bin:/bin';

/** What a request may run, or the typed refusal. Pure: the file is already loaded. */
export const resolveWorkload = (
  jobs: JobsFile,
  request: Pick<RunRequest, 'job' | 'command' | 'args'>,
): { ok: true; workload: ResolvedWorkload } | { ok: false; error: AgentErrorBody } => {
  if (request.job !== undefined) {
    const job = Object.hasOwn(jobs.jobs, request.job) ? jobs.jobs[request.job] : undefined;
    if (!job) return { ok: false, error: agentError('UNKNOWN_JOB', `no job named ${request.job}`) };
    if (request.args.length > job.argsMax)
      return {
        ok: false,
        error: agentError('ARGS_NOT_ALLOWED', `job ${request.job} takes at most ${job.argsMax} arguments`),
      };
    const patterns = job.argPatterns.map((source) => new RegExp(`^(?:${source})$`, 'u'));
    const refused = request.args.find(
      (arg) => !job.allowedArgs.includes(arg) && !patterns.some((pattern) => pattern.test(arg)),
    );
    if (refused !== undefined)
      return {
        ok: false,
        error: agentError(
          'ARGS_NOT_ALLOWED',
          `job ${request.job} does not allow the argument ${JSON.stringify(refused)}`,
        ),
      };
    return {
      ok: true,
      workload: {
        job: request.job,
        command: job.command,
        args: [...job.args, ...request.args],
        env: { PATH: DEFAULT_PATH, ...job.env },
        ...(job.cwd ? { cwd: job.cwd } : {}),
      },
    };
  }
  const command = request.command ?? '';
  if (!jobs.allowCommands.includes(command))
    return { ok: false, error: agentError('COMMAND_NOT_ALLOWED', `${command} is not on the allowlist`) };
  return {
    ok: true,
    workload: { job: null, command, args: [...request.args], env: { PATH: DEFAULT_PATH, ...jobs.env } },
  };
};
