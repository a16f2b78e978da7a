import { type ChildProcess, spawn } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { groupMembers, isRunning, terminateGroup } from '../src/process-group.js';

/**
 * Real process groups on this machine (no NATS): what the watchdog does to a workload's
 * tree. Every group a test starts is SIGKILLed afterwards, whatever the outcome.
 */

const started: ChildProcess[] = [];
afterEach(() => {
  for (const child of started.splice(0)) {
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      // already gone
    }
  }
});

/** A shell leading its own group, with `children` sleeping children, each ignoring SIGTERM if asked. */
const startTree = async (children: number, ignoreTerm: boolean): Promise<number[]> => {
  const trap = ignoreTerm ? 'trap "" TERM; ' : '';
  const script = `${trap}for i in $(seq ${children}); do sleep 1000 & done; echo ready; wait`;
  const child = spawn('/bin/sh', ['-c', script], { detached: true, stdio: ['ignore', 'pipe', 'ignore'] });
  started.push(child);
  await new Promise<void>((resolve, reject) => {
    child.stdout!.once('data', () => resolve());
    child.once('error', reject);
  });
  return groupMembers(child.pid!) ?? [];
};

describe('ending a process group', () => {
  it('ends a tree that leaves on SIGTERM without needing SIGKILL', async () => {
    const members = await startTree(3, false);
    expect(members).toHaveLength(4);
    const result = await terminateGroup(Math.min(...members), 5_000);
    expect(result).toEqual({ killed: false, gone: true });
    expect(members.filter(isRunning)).toEqual([]);
  });

  it('SIGKILLs what ignores SIGTERM once the grace has passed, not before', async () => {
    const members = await startTree(2, true);
    const pgid = Math.min(...members);
    const startedAt = performance.now();
    const result = await terminateGroup(pgid, 300);
    const tookMs = performance.now() - startedAt;
    expect(result).toEqual({ killed: true, gone: true });
    expect(tookMs).toBeGreaterThanOrEqual(300);
    expect(tookMs).toBeLessThan(1_300);
    expect(members.filter(isRunning)).toEqual([]);
  });

  it('ends 50 groups at once with one poll loop, each within a second', async () => {
    const trees = await Promise.all(Array.from({ length: 50 }, () => startTree(2, false)));
    const startedAt = performance.now();
    const results = await Promise.all(trees.map((members) => terminateGroup(Math.min(...members), 5_000)));
    expect(performance.now() - startedAt).toBeLessThan(1_000);
    expect(results.every((result) => result.gone && !result.killed)).toBe(true);
    expect(trees.flat().filter(isRunning)).toEqual([]);
  });

  it('answers at once for a group that no longer exists', async () => {
    expect(await terminateGroup(2 ** 22 - 3, 1_000)).toEqual({ killed: false, gone: true });
  });
});
