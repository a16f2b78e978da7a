import { Projection, type Subscription, subscribe } from '@lease/bus';
import {
  ADMISSION_SUBJECT,
  type AuditCounts,
  type AuditFinding,
  createAuditor,
  decodeEvent,
  type Grant,
  initialState,
  LeaseError,
  type LeaseEvent,
  type LeaseState,
  leaseSubject,
  STREAM_NAME,
  type StoredEvent,
} from '@lease/events';
import { DeliverPolicy, type JetStreamManager, jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type { LogPoint } from './format.js';
import { heapTrimmer } from './heap.js';

/**
 * Reading the log: every command here streams it (ordered consumers, bounded batches) and
 * keeps only the fold's own state, so memory does not grow with the length of history.
 */

/** Messages asked of the server at a time when replaying. */
export const REPLAY_BATCH = 4_096;
/** An audit gives up when its replay has not finished in this time. */
export const AUDIT_TIMEOUT_MS = 30 * 60_000;

export type OnProgress = (seq: number, lastSeq: number) => void;

export const streamLastSeq = async (jsm: JetStreamManager): Promise<number> => {
  try {
    return (await jsm.streams.info(STREAM_NAME)).state.last_seq;
  } catch (cause) {
    throw new LeaseError('UNAVAILABLE', `cannot read stream ${STREAM_NAME}: ${(cause as Error).message}`, {
      cause,
    });
  }
};

/** True once `seq`/`time` is past the point (the point itself is included). */
const beyond = (point: LogPoint, seq: number, time: Date): boolean =>
  'seq' in point ? seq > point.seq : time.getTime() > point.time.getTime();

export interface ReadItem {
  readonly seq: number;
  readonly time: Date;
  readonly subject: string;
  /** undefined for an undecodable message (then `problem` says why). */
  readonly event: LeaseEvent | undefined;
  readonly problem?: string;
}

/**
 * Reads the log from `from` (a sequence or time, inclusive) up to `to` (inclusive) or up to
 * what the stream held when the read began, whichever comes first; undecodable messages are
 * passed on too, with their problem, so that a fold can count their sequence.
 */
export async function* readLog(
  nc: NatsConnection,
  options: {
    from?: LogPoint;
    to?: LogPoint;
    subjects?: { leaseId: string };
    onProgress?: OnProgress;
  } = {},
): AsyncGenerator<ReadItem> {
  const jsm = await jetstreamManager(nc);
  const lastSeq = options.subjects
    ? await lastSeqOnSubject(jsm, leaseSubject(options.subjects.leaseId))
    : await streamLastSeq(jsm);
  if (lastSeq === 0) return;
  if (options.to && 'seq' in options.to && options.to.seq <= 0) return;
  const endSeq = options.to && 'seq' in options.to ? Math.min(options.to.seq, lastSeq) : lastSeq;
  const from = options.from ?? { seq: 1 };
  if ('seq' in from && from.seq > endSeq) return;
  // Problems arrive in order with the events, through a callback: queue them so that they
  // come out of this generator in sequence order.
  const pending: ReadItem[] = [];
  let done = false;
  let subscription: Subscription | undefined;
  const finishAt = (seq: number) => {
    if (seq >= endSeq) {
      done = true;
      void subscription?.close();
    }
  };
  subscription = await subscribe(nc, {
    from: 'seq' in from ? { seq: Math.max(1, from.seq) } : { time: from.time },
    batch: REPLAY_BATCH,
    ...(options.subjects ? { filter: { leaseId: options.subjects.leaseId, types: LIFECYCLE_TYPES } } : {}),
    onProblem: (problem) => {
      pending.push({
        seq: problem.seq,
        time: problem.time,
        subject: problem.subject,
        event: undefined,
        problem: `${problem.problem}: ${problem.message}`,
      });
      finishAt(problem.seq);
    },
  });
  try {
    // A stream whose remaining messages are all beyond the time point ends on `done`, via close().
    for await (const item of subscription) {
      for (const problem of pending.splice(0)) {
        if (options.to && beyond(options.to, problem.seq, problem.time)) return;
        yield problem;
      }
      if (options.to && beyond(options.to, item.seq, item.time)) return;
      yield { seq: item.seq, time: item.time, subject: item.subject, event: item.event };
      options.onProgress?.(item.seq, endSeq);
      if (item.seq >= endSeq || done) break;
    }
    for (const problem of pending.splice(0)) {
      if (options.to && beyond(options.to, problem.seq, problem.time)) return;
      yield problem;
    }
  } finally {
    await subscription.close();
  }
}

const LIFECYCLE_TYPES = ['LeaseRenewed', 'LeaseReleased', 'LeaseRevoked'] as const;

export const lastSeqOnSubject = async (jsm: JetStreamManager, subject: string): Promise<number> => {
  const last = await jsm.streams.getMessage(STREAM_NAME, { last_by_subj: subject }).catch(() => null);
  return last?.seq ?? 0;
};

/**
 * The state of every limit and lease as it was at `point`, rebuilt from the log alone: the
 * Projection the services run, stopped at the point (a time point is first turned into the
 * last sequence stored at or before it).
 */
export const replayAt = async (
  nc: NatsConnection,
  point: LogPoint,
  onProgress?: OnProgress,
): Promise<{ state: LeaseState; lastTime: Date | undefined }> => {
  const jsm = await jetstreamManager(nc);
  const lastSeq = await streamLastSeq(jsm);
  const untilSeq =
    'seq' in point ? Math.max(0, Math.min(point.seq, lastSeq)) : await lastSeqAt(nc, point.time, lastSeq);
  if (untilSeq === 0) return { state: initialState(), lastTime: undefined };
  const trim = heapTrimmer();
  const projection = new Projection({
    js: jetstream(nc),
    jsm,
    batchMessages: REPLAY_BATCH,
    untilSeq,
    onEvent: (stored: StoredEvent) => {
      trim(stored.seq);
      onProgress?.(stored.seq, untilSeq);
    },
  });
  try {
    await projection.start(AUDIT_TIMEOUT_MS);
  } finally {
    await projection.stop();
  }
  const last = await jsm.streams.getMessage(STREAM_NAME, { seq: projection.state.lastSeq }).catch(() => null);
  return { state: projection.state, lastTime: last?.time };
};

/** The last sequence stored at or before `time` (by the millisecond), from the first message after it. */
const lastSeqAt = async (nc: NatsConnection, time: Date, lastSeq: number): Promise<number> => {
  if (lastSeq === 0) return 0;
  // At or after the last message: all of it (and no wait for a message that will not come).
  const last = await (await jetstreamManager(nc)).streams
    .getMessage(STREAM_NAME, { seq: lastSeq })
    .catch(() => null);
  if (last && last.time.getTime() <= time.getTime()) return lastSeq;
  const consumer = await jetstream(nc).consumers.get(STREAM_NAME, {
    deliver_policy: DeliverPolicy.StartTime,
    opt_start_time: new Date(time.getTime() + 1).toISOString(),
  });
  const next = await consumer.next({ expires: 2_000 });
  await consumer.delete().catch(() => undefined);
  return next ? Math.min(next.seq - 1, lastSeq) : lastSeq;
};

export interface HistoryEntry {
  readonly seq: number;
  readonly time: Date;
  readonly subject: string;
  readonly event: LeaseEvent | undefined;
  readonly problem?: string;
}

/** A waiter holds its place at most this long (the gateway's WAIT_MAX_MS bound): how far before a grant its queueing can be. */
export const WAIT_WINDOW_MS = 60 * 60_000;

/** True when an admission event names the lease: its queueing, the end of its wait, its grant. */
const namesLease = (event: LeaseEvent, leaseId: string): boolean =>
  (event.type === 'AcquiresQueued' && event.waiters.some((w) => w.leaseId === leaseId)) ||
  (event.type === 'WaitEnded' && event.leaseId === leaseId) ||
  (event.type === 'LeasesGranted' && event.grants.some((g: Grant) => g.leaseId === leaseId));

/**
 * A lease's entries on the admission subject (its queueing, the end of its wait, its grant),
 * read from `from` (the start of the log without it) up to its grant, `throughSeq`, or the
 * last admission message, whichever comes first. Streams; stops at the grant.
 */
export const admissionHistory = async (
  nc: NatsConnection,
  leaseId: string,
  options: { from?: Date; throughSeq?: number; onProgress?: OnProgress } = {},
): Promise<HistoryEntry[]> => {
  const jsm = await jetstreamManager(nc);
  const lastSeq = Math.min(
    await lastSeqOnSubject(jsm, ADMISSION_SUBJECT),
    options.throughSeq ?? Number.POSITIVE_INFINITY,
  );
  const entries: HistoryEntry[] = [];
  if (lastSeq === 0) return entries;
  const consumer = await jetstream(nc).consumers.get(STREAM_NAME, {
    filter_subjects: [ADMISSION_SUBJECT],
    ...(options.from
      ? { deliver_policy: DeliverPolicy.StartTime, opt_start_time: options.from.toISOString() }
      : {}),
  });
  try {
    for (;;) {
      const batch = await consumer.fetch({ max_messages: REPLAY_BATCH, expires: 5_000 });
      let seen = 0;
      for await (const message of batch) {
        seen += 1;
        if (message.seq > lastSeq) {
          batch.stop();
          return entries;
        }
        options.onProgress?.(message.seq, lastSeq);
        const decoded = decodeEvent(message.data);
        if (decoded.ok && namesLease(decoded.event, leaseId)) {
          entries.push({
            seq: message.seq,
            time: message.time,
            subject: message.subject,
            event: decoded.event,
          });
          if (decoded.event.type === 'LeasesGranted') {
            batch.stop();
            return entries;
          }
        }
        if (message.seq >= lastSeq) {
          batch.stop();
          return entries;
        }
      }
      if (seen === 0) return entries;
    }
  } finally {
    await consumer.delete().catch(() => undefined);
  }
};

/** Every event on a lease's own subject, in order (an ordered consumer filtered to that subject). */
export const leaseEvents = async (nc: NatsConnection, leaseId: string): Promise<HistoryEntry[]> => {
  const entries: HistoryEntry[] = [];
  for await (const item of readLog(nc, { subjects: { leaseId } })) entries.push(item);
  return entries;
};

export interface AuditResult {
  readonly lastSeq: number;
  readonly counts: AuditCounts;
  readonly elapsedMs: number;
}

/**
 * Replays the whole log through the same Projection the services use, reporting every
 * anomaly the fold records and every undecodable message, plus the auditor's re-checks.
 */
export const audit = async (
  nc: NatsConnection,
  onFinding: (finding: AuditFinding) => void,
  onProgress?: OnProgress,
  timeoutMs = AUDIT_TIMEOUT_MS,
): Promise<AuditResult> => {
  const jsm = await jetstreamManager(nc);
  const lastSeq = await streamLastSeq(jsm);
  const auditor = createAuditor();
  const trim = heapTrimmer();
  const started = performance.now();
  const projection = new Projection({
    js: jetstream(nc),
    jsm,
    batchMessages: REPLAY_BATCH,
    onEvent: (stored, state) => {
      trim(stored.seq);
      for (const finding of auditor.observe(stored, state)) onFinding(finding);
      onProgress?.(stored.seq, lastSeq);
    },
    onProblem: (seq, subject, problem, message) => onFinding(auditor.problem(seq, subject, problem, message)),
  });
  try {
    await projection.start(timeoutMs);
  } finally {
    await projection.stop();
  }
  return {
    lastSeq: projection.state.lastSeq,
    counts: auditor.counts(),
    elapsedMs: performance.now() - started,
  };
};
