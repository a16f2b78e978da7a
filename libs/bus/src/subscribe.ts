import {
  ADMISSION_SUBJECT,
  type DecodeProblem,
  decodeEvent,
  EVENTS_WILDCARD,
  LEASE_SUBJECT_PREFIX,
  type LeaseEvent,
  type LeaseEventType,
  leaseSubject,
  STREAM_NAME,
} from '@lease/events';
import {
  AckPolicy,
  type Consumer,
  type ConsumerConfig,
  type ConsumerMessages,
  DeliverPolicy,
  jetstream,
  jetstreamManager,
} from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';

/**
 * The typed subscription API for anything that consumes lease events: decoded (old
 * versions upcast) and filtered events in log order, with back-pressure and a resumable
 * position. Undecodable messages are skipped, counted and reported, never thrown.
 */

export type SubscribeFrom = 'now' | 'start' | { readonly seq: number } | { readonly time: Date };

export interface EventFilter {
  /** Only these event types. */
  readonly types?: readonly LeaseEventType[];
  /** Only events of this lease: its grant (the whole LeasesGranted event), its queueing, its own subject. */
  readonly leaseId?: string;
  /**
   * Only events of this requester: grants and waiters naming it, its requester limit (and
   * the default, `*`), and the lifecycle of leases whose grant this subscription saw.
   */
  readonly requester?: string;
  /** Only events of this limit: its definition, grants and waiters claiming it, and the lifecycle of leases whose grant this subscription saw. */
  readonly limit?: string;
}

export interface SubscribeOptions {
  readonly from?: SubscribeFrom;
  readonly filter?: EventFilter;
  /**
   * A durable JetStream consumer of this name keeps the position on the server: items must
   * be acknowledged (`ack()`, in order), and a subscriber that crashes resumes after the
   * last acknowledged item. `from` applies only when the durable is created. One
   * subscriber at a time per durable: it is a resumable position, not a work queue.
   */
  readonly durable?: string;
  /** Messages asked of the server at a time: the bound on what is buffered here. */
  readonly batch?: number;
  /** How long one pull waits for messages when there are none (at least 1 s; a live tail polls this often). */
  readonly pullWaitMs?: number;
  readonly onProblem?: (problem: SubscriptionProblem) => void;
}

export interface SubscriptionProblem {
  readonly seq: number;
  readonly time: Date;
  readonly subject: string;
  readonly problem: DecodeProblem;
  readonly message: string;
}

export interface SubscribedEvent {
  readonly seq: number;
  /** The stream's timestamp of the message (when the server stored it). */
  readonly time: Date;
  readonly subject: string;
  readonly event: LeaseEvent;
  /**
   * Durable subscriptions: records the position on the server, resolving once the server
   * confirmed it. A no-op otherwise (the caller stores `seq` and resumes with `{ seq }`).
   */
  ack(): Promise<void>;
}

export interface Subscription extends AsyncIterable<SubscribedEvent> {
  /** Undecodable messages skipped so far. */
  readonly problems: number;
  /** Messages read from the server so far (matching the filter or not, decodable or not). */
  readonly read: number;
  /** The stream sequence of the last message read. */
  readonly lastSeq: number;
  /** Stops the subscription: the iterator ends. Idempotent. */
  close(): Promise<void>;
}

export const SUBSCRIBE_BATCH_DEFAULT = 512;
export const SUBSCRIBE_BATCH_MAX = 8_192;
export const SUBSCRIBE_PULL_WAIT_DEFAULT_MS = 5_000;
/** The client library refuses a pull that waits less. */
export const SUBSCRIBE_PULL_WAIT_MIN_MS = 1_000;
/** Leases remembered (lease id to requester and limits) for the requester and limit filters. */
export const LEASE_INDEX_MAX = 100_000;
const RETRY_DELAY_MS = 250;
const RETRIES_MAX = 40;

const ADMISSION_TYPES: ReadonlySet<LeaseEventType> = new Set([
  'LimitDefined',
  'LimitResized',
  'LimitRemoved',
  'RequesterLimitSet',
  'LeasesGranted',
  'AcquiresQueued',
  'WaitEnded',
]);

/** The subjects the server needs to send for a filter; the rest is filtered here. */
export const filterSubjects = (filter: EventFilter = {}): string[] => {
  const types = filter.types;
  const onlyAdmission = types?.every((type) => ADMISSION_TYPES.has(type)) === true;
  const onlyLifecycle = types?.every((type) => !ADMISSION_TYPES.has(type)) === true;
  const needsIndex = filter.requester !== undefined || filter.limit !== undefined;
  if (filter.leaseId !== undefined) {
    if (onlyLifecycle && !needsIndex) return [leaseSubject(filter.leaseId)];
    if (onlyAdmission) return [ADMISSION_SUBJECT];
    return [ADMISSION_SUBJECT, leaseSubject(filter.leaseId)];
  }
  if (onlyAdmission) return [ADMISSION_SUBJECT];
  if (onlyLifecycle && !needsIndex) return [`${LEASE_SUBJECT_PREFIX}.*`];
  return [EVENTS_WILDCARD];
};

interface IndexedLease {
  readonly requester: string;
  readonly limits: readonly string[];
}

/**
 * The client-side half of a filter. It must see every event the server sends, in order,
 * whether it matches or not: grants and waiters feed the index that maps a lease to its
 * requester and limits. The index is bounded (LEASE_INDEX_MAX, oldest forgotten first),
 * and it knows only grants this subscription read: a lease granted before `from` is not
 * matched by requester or limit (its lease id filter still works).
 */
export const createEventMatcher = (filter: EventFilter = {}, indexMax = LEASE_INDEX_MAX) => {
  const types = filter.types === undefined ? undefined : new Set(filter.types);
  const needsIndex = filter.requester !== undefined || filter.limit !== undefined;
  const index = new Map<string, IndexedLease>();
  const remember = (leaseId: string, requester: string, slots: readonly { limit: string }[]) => {
    if (!needsIndex) return;
    index.delete(leaseId);
    index.set(leaseId, { requester, limits: slots.map((claim) => claim.limit) });
    if (index.size > indexMax) index.delete(index.keys().next().value as string);
  };
  const claimMatches = (leaseId: string, requester: string, slots: readonly { limit: string }[]) =>
    (filter.leaseId === undefined || leaseId === filter.leaseId) &&
    (filter.requester === undefined || requester === filter.requester) &&
    (filter.limit === undefined || slots.some((claim) => claim.limit === filter.limit));
  const leaseMatches = (leaseId: string) => {
    if (filter.leaseId !== undefined && leaseId !== filter.leaseId) return false;
    if (!needsIndex) return true;
    const known = index.get(leaseId);
    if (!known) return false;
    return (
      (filter.requester === undefined || known.requester === filter.requester) &&
      (filter.limit === undefined || known.limits.includes(filter.limit))
    );
  };

  const matches = (event: LeaseEvent): boolean => {
    switch (event.type) {
      case 'LeasesGranted': {
        let any = false;
        for (const grant of event.grants) {
          remember(grant.leaseId, grant.requester, grant.slots);
          if (claimMatches(grant.leaseId, grant.requester, grant.slots)) any = true;
        }
        return any;
      }
      case 'AcquiresQueued': {
        let any = false;
        for (const waiter of event.waiters) {
          remember(waiter.leaseId, waiter.requester, waiter.slots);
          if (claimMatches(waiter.leaseId, waiter.requester, waiter.slots)) any = true;
        }
        return any;
      }
      case 'LimitDefined':
      case 'LimitResized':
      case 'LimitRemoved':
        return filter.leaseId === undefined && filter.requester === undefined
          ? filter.limit === undefined || event.limit === filter.limit
          : false;
      case 'RequesterLimitSet':
        return filter.leaseId === undefined && filter.limit === undefined
          ? filter.requester === undefined || event.requester === filter.requester || event.requester === '*'
          : false;
      case 'WaitEnded':
        return leaseMatches(event.leaseId);
      case 'LeaseRenewed':
        return leaseMatches(event.leaseId);
      case 'LeaseReleased':
      case 'LeaseRevoked': {
        const matched = leaseMatches(event.leaseId);
        index.delete(event.leaseId);
        return matched;
      }
      default:
        return false;
    }
  };

  return {
    /** Whether the event passes the filter; call it for every event, in log order. */
    test: (event: LeaseEvent): boolean => {
      const matched = matches(event);
      return matched && (types === undefined || types.has(event.type));
    },
    get indexed() {
      return index.size;
    },
  };
};

const startOf = (from: SubscribeFrom): Partial<ConsumerConfig> => {
  if (from === 'start') return { deliver_policy: DeliverPolicy.All };
  if (from === 'now') return { deliver_policy: DeliverPolicy.New };
  if ('seq' in from) {
    if (!Number.isInteger(from.seq) || from.seq < 1)
      throw new RangeError(`from.seq must be >= 1, not ${from.seq}`);
    return { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: from.seq };
  }
  if (Number.isNaN(from.time.getTime())) throw new RangeError('from.time is not a valid date');
  return { deliver_policy: DeliverPolicy.StartTime, opt_start_time: from.time.toISOString() };
};

const sameSubjects = (config: ConsumerConfig, subjects: readonly string[]): boolean => {
  const actual = config.filter_subjects ?? (config.filter_subject ? [config.filter_subject] : []);
  return JSON.stringify([...actual].sort()) === JSON.stringify([...subjects].sort());
};

/**
 * The durable consumer for `name`, created at `from`, or the existing one. An existing
 * one with messages delivered but not acknowledged (its subscriber died) is recreated at
 * its acknowledgement floor: otherwise the server would send what follows the
 * unacknowledged messages first, and those only after their ack wait.
 */
const openDurable = async (
  nc: NatsConnection,
  name: string,
  from: SubscribeFrom,
  subjects: readonly string[],
  batch: number,
): Promise<Consumer> => {
  const jsm = await jetstreamManager(nc);
  const existing = await jsm.consumers.info(STREAM_NAME, name).catch(() => undefined);
  const base: Partial<ConsumerConfig> = {
    durable_name: name,
    ack_policy: AckPolicy.Explicit,
    ...(subjects.length > 0 ? { filter_subjects: [...subjects] } : {}),
    max_ack_pending: batch * 2,
  };
  if (!existing) {
    // 'now' and 'start' become sequences, so that a recreation starts at the same place.
    let start = startOf(from);
    if (from === 'now') {
      const info = await jsm.streams.info(STREAM_NAME);
      start = { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: info.state.last_seq + 1 };
    } else if (from === 'start') {
      start = { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: 1 };
    }
    await jsm.consumers.add(STREAM_NAME, { ...base, ...start });
  } else if (existing.num_ack_pending > 0 || !sameSubjects(existing.config, subjects)) {
    const floor = existing.ack_floor.stream_seq;
    const start: Partial<ConsumerConfig> =
      floor > 0
        ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: floor + 1 }
        : {
            deliver_policy: existing.config.deliver_policy,
            ...(existing.config.opt_start_seq === undefined
              ? {}
              : { opt_start_seq: existing.config.opt_start_seq }),
            ...(existing.config.opt_start_time === undefined
              ? {}
              : { opt_start_time: existing.config.opt_start_time }),
          };
    await jsm.consumers.delete(STREAM_NAME, name);
    await jsm.consumers.add(STREAM_NAME, { ...base, ...start });
  }
  return jetstream(nc).consumers.get(STREAM_NAME, name);
};

/** Removes a durable subscription's position from the server. */
export const removeDurable = async (nc: NatsConnection, name: string): Promise<boolean> =>
  (await jetstreamManager(nc)).consumers.delete(STREAM_NAME, name).catch(() => false);

/**
 * Subscribes to the lease log. Pulls `batch` messages at a time and asks for the next
 * batch only once the caller has taken the previous one: a slow caller slows the pulls,
 * nothing piles up here.
 */
export const subscribe = async (
  nc: NatsConnection,
  options: SubscribeOptions = {},
): Promise<Subscription> => {
  const from = options.from ?? 'now';
  const batch = Math.min(
    Math.max(1, Math.floor(options.batch ?? SUBSCRIBE_BATCH_DEFAULT)),
    SUBSCRIBE_BATCH_MAX,
  );
  const pullWaitMs = Math.max(
    SUBSCRIBE_PULL_WAIT_MIN_MS,
    options.pullWaitMs ?? SUBSCRIBE_PULL_WAIT_DEFAULT_MS,
  );
  const subjects = filterSubjects(options.filter);
  const matcher = createEventMatcher(options.filter);
  const durable = options.durable;
  // 'now' is pinned to a sequence at once: the server consumer is created only at the first
  // pull, and what is appended meanwhile must not be lost.
  const start =
    from === 'now' && !durable
      ? {
          deliver_policy: DeliverPolicy.StartSequence,
          opt_start_seq: (await (await jetstreamManager(nc)).streams.info(STREAM_NAME)).state.last_seq + 1,
        }
      : startOf(from);
  // The stream captures only lease.events.>: a filter naming all of it would only cost the
  // server its slower filtered read path (measured: several times slower with many subjects).
  const serverFilter = subjects.length === 1 && subjects[0] === EVENTS_WILDCARD ? [] : subjects;
  const consumer = durable
    ? await openDurable(nc, durable, from, serverFilter, batch)
    : await jetstream(nc).consumers.get(STREAM_NAME, {
        ...start,
        ...(serverFilter.length > 0 ? { filter_subjects: serverFilter } : {}),
      });

  let closed = false;
  let current: ConsumerMessages | undefined;
  let problems = 0;
  let read = 0;
  let lastSeq = 0;
  const noAck = async () => undefined;

  async function* items(): AsyncGenerator<SubscribedEvent> {
    let failures = 0;
    try {
      while (!closed) {
        try {
          current = await consumer.fetch({ max_messages: batch, expires: pullWaitMs });
        } catch (error) {
          // The server may be restarting: a bounded number of retries, then the error.
          if (closed) return;
          failures += 1;
          if (failures > RETRIES_MAX) throw error;
          await new Promise((resolve) => setTimeout(resolve, RETRY_DELAY_MS));
          continue;
        }
        failures = 0;
        if (closed) current.stop();
        for await (const msg of current) {
          read += 1;
          lastSeq = msg.seq;
          const decoded = decodeEvent(msg.data);
          if (!decoded.ok) {
            problems += 1;
            options.onProblem?.({
              seq: msg.seq,
              time: msg.time,
              subject: msg.subject,
              problem: decoded.problem,
              message: decoded.message,
            });
            if (durable) msg.ack();
            continue;
          }
          if (!matcher.test(decoded.event)) {
            if (durable) msg.ack();
            continue;
          }
          yield {
            seq: msg.seq,
            time: msg.time,
            subject: msg.subject,
            event: decoded.event,
            ack: durable
              ? async () => {
                  await msg.ackAck();
                }
              : noAck,
          };
          if (closed) break;
        }
      }
    } finally {
      closed = true;
      current?.stop();
    }
  }

  const iterator = items();
  return {
    [Symbol.asyncIterator]: () => iterator,
    get problems() {
      return problems;
    },
    get read() {
      return read;
    },
    get lastSeq() {
      return lastSeq;
    },
    async close() {
      closed = true;
      current?.stop();
    },
  };
};
