import { describe, expect, it } from 'vitest';
import { DeadlineIndex, shardOf } from '../src/index.js';

describe('the deadline index', () => {
  it('hands out entries in order of due time, and only once due', () => {
    const index = new DeadlineIndex();
    const dues = [50, 10, 40, 10, 30, 20, 60, 0];
    dues.forEach((due, i) => {
      index.push(due, `L${i}`);
    });
    expect(index.popDue(-1)).toBeUndefined();
    const popped: number[] = [];
    for (let entry = index.popDue(45); entry; entry = index.popDue(45)) popped.push(entry.dueMs);
    expect(popped).toEqual([0, 10, 10, 20, 30, 40]);
    expect(index.size).toBe(2);
    expect(index.peekDueMs()).toBe(50);
  });

  it('stays ordered over many random pushes and pops', () => {
    const index = new DeadlineIndex();
    let seed = 7;
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % 10_000;
    };
    for (let i = 0; i < 5_000; i++) index.push(random(), `L${i}`);
    let last = -1;
    for (let entry = index.popDue(10_000); entry; entry = index.popDue(10_000)) {
      expect(entry.dueMs).toBeGreaterThanOrEqual(last);
      last = entry.dueMs;
    }
    expect(index.size).toBe(0);
  });

  it('splits leases between replicas the same way on every replica', () => {
    const counts = [0, 0, 0];
    for (let i = 0; i < 3_000; i++) counts[shardOf(`lease-${i}`, 3)]! += 1;
    for (const count of counts) expect(count).toBeGreaterThan(800);
    expect(shardOf('abc', 3)).toBe(shardOf('abc', 3));
  });
});
