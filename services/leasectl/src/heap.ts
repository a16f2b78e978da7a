import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/**
 * A full garbage collection every TRIM_EVERY_EVENTS folded events of a replay (audit,
 * replay --at). A replay allocates fast and keeps little (the fold's state), and the
 * consumer's buffered messages outlive young-generation collections, so V8 lets old-space
 * garbage pile up: the audit of 1M events peaked at 207-225 MB RSS, against 184-185 MB with
 * a collection every 200k events, at the same rate within noise (20-30 ms per collection;
 * bench:audit). The young generation cannot be bounded from inside a running process
 * (`--max-semi-space-size` set at run time is ignored), so the collector is exposed instead.
 */
export const TRIM_EVERY_EVENTS = 150_000;

let collect: (() => void) | undefined;
const collector = (): (() => void) => {
  if (!collect) {
    setFlagsFromString('--expose-gc');
    collect = runInNewContext('gc') as () => void;
  }
  return collect;
};

/** Returns a callback for every folded sequence that collects once per TRIM_EVERY_EVENTS of them. */
export const heapTrimmer = (every = TRIM_EVERY_EVENTS, gc = collector()): ((seq: number) => void) => {
  let next = every;
  return (seq) => {
    if (seq < next) return;
    next = seq + every;
    gc();
  };
};
