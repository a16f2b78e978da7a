import { describe, expect, it } from 'vitest';
import { JobsFileV1, resolveWorkload } from '../src/jobs.js';

const jobs = JobsFileV1.parse({
  jobs: {
    migrate: {
      command: '/opt/app/migrate',
      args: ['--config', '/etc/app.toml'],
      allowedArgs: ['--dry-run'],
      argPatterns: ['--target=\\d+'],
      argsMax: 2,
      env: { APP_ENV: 'prod' },
    },
  },
  allowCommands: ['/usr/bin/sleep'],
});

describe('what a request may run', () => {
  it('runs a job with its own arguments first, then the allowed ones, in its own environment', () => {
    expect(resolveWorkload(jobs, { job: 'migrate', args: ['--dry-run', '--target=42'] })).toEqual({
      ok: true,
      workload: {
        job: 'migrate',
        command: '/opt/app/migrate',
        args: ['--config', '/etc/app.toml', '--dry-run', '--target=42'],
        env: { PATH: '/usr/local/bin:/usr/bin:/bin', APP_ENV: 'prod' },
      },
    });
  });

  it('matches a pattern against the whole argument, so a suffix cannot ride along', () => {
    const result = resolveWorkload(jobs, { job: 'migrate', args: ['--target=1; rm -rf /'] });
    expect(result).toMatchObject({ ok: false, error: { code: 'ARGS_NOT_ALLOWED', retryable: false } });
  });

  it('refuses more arguments than the job takes', () => {
    const result = resolveWorkload(jobs, { job: 'migrate', args: ['--dry-run', '--dry-run', '--dry-run'] });
    expect(result).toMatchObject({ ok: false, error: { code: 'ARGS_NOT_ALLOWED' } });
  });

  it('refuses a job it does not define, including names inherited from Object', () => {
    for (const job of ['deploy', 'constructor', '__proto__', 'toString']) {
      expect(resolveWorkload(jobs, { job, args: [] })).toMatchObject({
        ok: false,
        error: { code: 'UNKNOWN_JOB' },
      });
    }
  });

  it('runs an allowlisted command exactly as listed, and nothing else', () => {
    expect(resolveWorkload(jobs, { command: '/usr/bin/sleep', args: ['5'] })).toMatchObject({
      ok: true,
      workload: { command: '/usr/bin/sleep', args: ['5'] },
    });
    for (const command of ['sleep', '/usr/bin/../bin/sleep', '/bin/sh']) {
      expect(resolveWorkload(jobs, { command, args: [] })).toMatchObject({
        ok: false,
        error: { code: 'COMMAND_NOT_ALLOWED' },
      });
    }
  });

  it('rejects a jobs file with a relative command or a broken pattern', () => {
    expect(JobsFileV1.safeParse({ jobs: { a: { command: 'migrate' } } }).success).toBe(false);
    expect(JobsFileV1.safeParse({ jobs: { a: { command: '/bin/a', argPatterns: ['('] } } }).success).toBe(
      false,
    );
    expect(JobsFileV1.safeParse({ allowCommands: ['sleep'] }).success).toBe(false);
  });
});
