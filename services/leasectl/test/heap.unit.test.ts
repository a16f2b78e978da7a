import { describe, expect, it } from 'vitest';
import { heapTrimmer, TRIM_EVERY_EVENTS } from '../src/heap.js';

describe('trimming the heap during a replay', () => {
  it('collects once per TRIM_EVERY_EVENTS folded sequences, also when sequences jump', () => {
    let collections = 0;
    const trim = heapTrimmer(100, () => {
      collections += 1;
    });
    for (let seq = 1; seq <= 1_000; seq++) trim(seq);
    expect(collections).toBe(10);
    trim(5_000);
    trim(5_050);
    expect(collections).toBe(11);
    expect(TRIM_EVERY_EVENTS).toBeGreaterThan(10_000);
  });

  it('reaches the real collector of a process started without --expose-gc', () => {
    const trim = heapTrimmer(1);
    expect(() => trim(1)).not.toThrow();
  });
});
