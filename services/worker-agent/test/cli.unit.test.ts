import { describe, expect, it } from 'vitest';
import { parseOneShot } from '../src/cli.js';
import { parseDurationMs } from '../src/duration.js';
import { EXIT, exitCodeForOutcome, exitCodeForStartError } from '../src/exit-codes.js';

describe('lease-agent run: the command line', () => {
  it('reads limits, durations and the command after --, which it never gives a shell', () => {
    const options = parseOneShot(
      [
        '--limit',
        'db-migrations=1',
        '--limit',
        'gpu=2',
        '--ttl',
        '30s',
        '--wait',
        '1m',
        '--',
        './migrate.sh',
        '--to',
        '$(reboot)',
      ],
      { WORKER_ID: 'host-1' },
    );
    expect(options).toMatchObject({
      slots: [
        { limit: 'db-migrations', count: 1 },
        { limit: 'gpu', count: 2 },
      ],
      ttlMs: 30_000,
      initialTtlMs: 30_000,
      waitMs: 60_000,
      graceMs: 5_000,
      workerId: 'host-1',
      requester: 'host-1',
      command: './migrate.sh',
      args: ['--to', '$(reboot)'],
    });
  });

  it('never lets the initial TTL be shorter than the renewal TTL', () => {
    const options = parseOneShot(['--limit', 'a', '--ttl', '10s', '--initial-ttl', '2s', '--', 'true'], {});
    expect(options.initialTtlMs).toBe(10_000);
  });

  it('refuses a command line without a TTL, a limit, or with a bad duration, as a usage error', () => {
    for (const argv of [
      ['--limit', 'a=1', '--', 'true'],
      ['--ttl', '1s', '--', 'true'],
      ['--limit', 'a=0', '--ttl', '1s', '--', 'true'],
      ['--limit', 'a=1', '--ttl', '1 fortnight', '--', 'true'],
    ]) {
      expect(() => parseOneShot(argv, {})).toThrow();
    }
  });

  it('parses durations in ms, s, m, h and refuses anything else', () => {
    expect([
      parseDurationMs('250'),
      parseDurationMs('500ms'),
      parseDurationMs('30s'),
      parseDurationMs('2m'),
      parseDurationMs('1h'),
    ]).toEqual([250, 500, 30_000, 120_000, 3_600_000]);
    for (const bad of ['', '1.5s', '-1s', '10d', 's']) expect(() => parseDurationMs(bad)).toThrow(RangeError);
  });
});

describe('lease-agent run: exit codes', () => {
  it('passes the workload exit code on, and 128 + the signal as a shell does', () => {
    expect(exitCodeForOutcome({ outcome: 'exited', exitCode: 7, signal: null })).toBe(7);
    expect(exitCodeForOutcome({ outcome: 'signalled', exitCode: null, signal: 'SIGSEGV' })).toBe(139);
  });

  it('has codes of its own for a lost lease, no slot, no gateway, and a command that cannot start', () => {
    expect(exitCodeForOutcome({ outcome: 'lease-lost', exitCode: null, signal: 'SIGTERM' })).toBe(
      EXIT.LEASE_LOST,
    );
    expect(EXIT.LEASE_LOST).toBe(75);
    expect(exitCodeForStartError('WAIT_TIMEOUT')).toBe(73);
    expect(exitCodeForStartError('NO_CAPACITY')).toBe(73);
    expect(exitCodeForStartError('UNAVAILABLE')).toBe(69);
    expect(exitCodeForStartError('UNKNOWN_LIMIT')).toBe(64);
    expect(exitCodeForStartError('SPAWN_FAILED')).toBe(127);
  });
});
