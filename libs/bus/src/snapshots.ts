import { gunzipSync, gzipSync } from 'node:zlib';
import {
  type LeaseState,
  SNAPSHOT_BUCKET,
  SNAPSHOT_OBJECT,
  snapshotOf,
  stateFromSnapshot,
} from '@lease/events';
import { type ObjectStore, Objm } from '@nats-io/obj';
import type { NatsConnection } from '@nats-io/transport-node';

const utf8 = new TextEncoder();
const utf8Decoder = new TextDecoder();

export type LoadedSnapshot =
  | { found: true; state: LeaseState; bytes: number }
  | { found: false; reason: 'none' | 'ahead-of-stream' | 'invalid'; message?: string };

/**
 * Projection snapshots in a JetStream object store, so that a restart replays only the
 * tail of the log. A snapshot is only ever a shortcut: one that is missing, unreadable or
 * claims a sequence the stream does not have (the stream was recreated) is ignored and
 * the whole log is replayed.
 */
export class SnapshotStore {
  private constructor(private readonly store: ObjectStore) {}

  static async open(nc: NatsConnection, options: { replicas?: number } = {}): Promise<SnapshotStore> {
    const store = await new Objm(nc).create(SNAPSHOT_BUCKET, { replicas: options.replicas ?? 1 });
    return new SnapshotStore(store);
  }

  async load(streamLastSeq: number): Promise<LoadedSnapshot> {
    const data = await this.store.getBlob(SNAPSHOT_OBJECT).catch(() => null);
    if (!data) return { found: false, reason: 'none' };
    let json: unknown;
    try {
      json = JSON.parse(utf8Decoder.decode(gunzipSync(data)));
    } catch (error) {
      return { found: false, reason: 'invalid', message: (error as Error).message };
    }
    const restored = stateFromSnapshot(json);
    if (!restored.ok) return { found: false, reason: 'invalid', message: restored.message };
    if (restored.state.lastSeq > streamLastSeq) return { found: false, reason: 'ahead-of-stream' };
    return { found: true, state: restored.state, bytes: data.length };
  }

  async save(state: LeaseState): Promise<{ seq: number; bytes: number }> {
    const seq = state.lastSeq;
    // Compressed: the object store checks a pure-JS SHA-256 of what it reads, which cost a
    // second on 40 MB of JSON; gzip at level 1 shrinks it several times, quickly.
    const data = gzipSync(utf8.encode(JSON.stringify(snapshotOf(state))), { level: 1 });
    await this.store.putBlob({ name: SNAPSHOT_OBJECT, description: `lease projection at seq ${seq}` }, data);
    return { seq, bytes: data.length };
  }
}

export interface SnapshotScheduleOptions {
  readonly everyMs: number;
  /** A snapshot is written only when at least this many events were folded since the last one. */
  readonly minEvents: number;
  /** The sequence of the snapshot the process started from (0 without one). */
  readonly fromSeq: number;
  readonly onSaved?: (saved: { seq: number; bytes: number; tookMs: number }) => void;
  readonly onError?: (error: unknown) => void;
}

/**
 * Writes a snapshot of a ready projection periodically, so that rebuild time depends on
 * the tail since the last snapshot, not on the length of history. Returns a stop function.
 */
export const scheduleSnapshots = (
  state: () => LeaseState | undefined,
  store: SnapshotStore,
  options: SnapshotScheduleOptions,
): (() => void) => {
  // Counted from the snapshot the process started from: one that replayed a long log
  // without a snapshot writes one at the first tick, not only after more events arrive.
  let lastSeq = options.fromSeq;
  let writing = false;
  const timer = setInterval(() => {
    const current = state();
    if (!current || writing || current.lastSeq - lastSeq < options.minEvents) return;
    writing = true;
    const started = Date.now();
    store
      .save(current)
      .then((saved) => {
        lastSeq = saved.seq;
        options.onSaved?.({ ...saved, tookMs: Date.now() - started });
      })
      .catch((error: unknown) => options.onError?.(error))
      .finally(() => {
        writing = false;
      });
  }, options.everyMs);
  timer.unref();
  return () => clearInterval(timer);
};
