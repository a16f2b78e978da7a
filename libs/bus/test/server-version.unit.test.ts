import { describe, expect, test } from 'vitest';
import { assertServerVersion, compareVersions, MIN_NATS_SERVER_VERSION } from '../src/server-version.js';

describe('compareVersions', () => {
  test.each([
    ['2.10.23', '2.10.23', 0],
    ['2.10.22', '2.10.23', -1],
    ['2.10.27', '2.10.23', 1],
    ['2.9.10', '2.10.0', -1],
    ['2.11.0', '2.10.99', 1],
    ['3.0.0', '2.12.1', 1],
    ['v2.10.27', '2.10.27', 0],
    ['2.11.0-RC.1', '2.11.0', -1],
    ['2.11.0', '2.11.0-RC.1', 1],
  ])('compares %s with %s as %i', (a, b, expected) => {
    expect(compareVersions(a, b)).toBe(expected);
  });

  test('refuses to compare something that is not a version', () => {
    expect(() => compareVersions('2.10', '2.10.23')).toThrow(/not a version: "2.10"/);
  });
});

describe('assertServerVersion', () => {
  test('the minimum is 2.10.23', () => {
    expect(MIN_NATS_SERVER_VERSION).toBe('2.10.23');
  });

  test('rejects 2.9.10, naming the concurrent compare-and-append bug and what to do', () => {
    expect(() => assertServerVersion('2.9.10')).toThrow(/2\.9\.10 is older than 2\.10\.23/);
    expect(() => assertServerVersion('2.9.10')).toThrow(/issue #4320/);
    expect(() => assertServerVersion('2.9.10')).toThrow(/bash scripts\/ensure-nats\.sh/);
  });

  test('rejects 2.10.22, naming the lost acknowledged writes on crash-restart and what to do', () => {
    expect(() => assertServerVersion('2.10.22')).toThrow(/2\.10\.22 is older than 2\.10\.23/);
    expect(() => assertServerVersion('2.10.22')).toThrow(
      /2\.10\.20 to 2\.10\.22 lost acknowledged writes on crash-restart/,
    );
    expect(() => assertServerVersion('2.10.22')).toThrow(/bash scripts\/ensure-nats\.sh/);
  });

  test('rejects a version it cannot read', () => {
    expect(() => assertServerVersion('unknown')).toThrow(/cannot tell the nats-server version/);
  });

  test.each(['2.10.23', '2.10.27', '2.11.0', '2.12.1', 'v2.10.27'])('accepts %s', (version) => {
    expect(() => assertServerVersion(version)).not.toThrow();
  });
});
