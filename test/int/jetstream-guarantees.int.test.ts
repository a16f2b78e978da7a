import { checkConnectedServer, type NatsServerHandle } from '@lease/bus';
import {
  JetStreamApiError,
  type JetStreamClient,
  type JetStreamManager,
  jetstream,
  jetstreamManager,
  type PubAck,
  StorageType,
} from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { useNats, useNatsCluster } from '../harness/nats.js';

/**
 * The server behaviour the coordinator's design rests on (DESIGN.md, "Conditional
 * appends"), checked against a real nats-server: a compare-and-append on a subject is
 * decided by the server, exactly one of several racing writers wins, also on a
 * replicated stream and while its leader is killed, and an acknowledged write survives
 * a crash.
 */

const STREAM = 'GUARANTEE';
/** JetStream's err_code for a failed Nats-Expected-Last-(Subject-)Sequence check. */
const WRONG_LAST_SEQUENCE = 10071;
const PUBLISH_TIMEOUT_MS = 5_000;
/** During a leader failover a publish may go unanswered; waiting longer proves nothing more. */
const FAILOVER_PUBLISH_TIMEOUT_MS = 2_000;
const TRIALS_SINGLE = 25;
const TRIALS_CLUSTER = 10;
const FAILOVER_ROUNDS = 3;
const FAILOVER_WRITERS_FIRST = 5;
const FAILOVER_WRITERS_IN_FLIGHT = 5;
const FAILOVER_WRITERS_DURING = 10;
const DURABILITY_MESSAGES = 200;
const POLL_INTERVAL_MS = 50;
/** Short, so that polling through an election tries again soon. */
const API_POLL_TIMEOUT_MS = 500;
const LEADER_WAIT_MS = 15_000;
const REPLICAS_AGREE_WAIT_MS = 10_000;

const RACES = [
  { writers: 2, expectation: 'zero' },
  { writers: 2, expectation: 'non-zero' },
  { writers: 20, expectation: 'zero' },
  { writers: 20, expectation: 'non-zero' },
] as const;

// ---------------------------------------------------------------------------------------
// Helpers

const connectTo = async (servers: readonly string[], name: string): Promise<NatsConnection> => {
  const nc = await connect({
    servers: [...servers],
    name,
    timeout: PUBLISH_TIMEOUT_MS,
    reconnectTimeWait: 100,
  });
  checkConnectedServer(nc);
  return nc;
};

const createStream = async (jsm: JetStreamManager, replicas: number) => {
  const info = await jsm.streams.add({
    name: STREAM,
    subjects: ['g.>'],
    storage: StorageType.File,
    num_replicas: replicas,
  });
  expect(info.config.num_replicas).toBe(replicas);
};

/** Polls until `attempt` returns a value, bounded in time and in count. */
const eventually = async <T>(
  what: string,
  timeoutMs: number,
  attempt: () => Promise<T | undefined>,
): Promise<T> => {
  const deadline = Date.now() + timeoutMs;
  const attemptsMax = Math.ceil(timeoutMs / POLL_INTERVAL_MS) + 1;
  let lastError: unknown;
  for (let i = 0; i < attemptsMax && Date.now() <= deadline; i++) {
    try {
      const value = await attempt();
      if (value !== undefined) return value;
    } catch (error) {
      lastError = error;
    }
    await new Promise((done) => setTimeout(done, POLL_INTERVAL_MS));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`, { cause: lastError });
};

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** `count` publishes started at once, all with the same expectation, spread over the connections. */
const racingAppends = (
  clients: readonly JetStreamClient[],
  subject: string,
  expectedLastSubjectSeq: number,
  count: number,
  options: { readonly label: string; readonly timeoutMs: number },
): Promise<PromiseSettledResult<PubAck>>[] =>
  Array.from({ length: count }, (_, i) =>
    clients[i % clients.length]!.publish(subject, encoder.encode(`${options.label}-${i}`), {
      expect: { lastSubjectSequence: expectedLastSubjectSeq },
      timeout: options.timeoutMs,
    }).then(
      (ack): PromiseSettledResult<PubAck> => ({ status: 'fulfilled', value: ack }),
      (reason): PromiseSettledResult<PubAck> => ({ status: 'rejected', reason }),
    ),
  );

const isWrongLastSequence = (error: unknown) =>
  error instanceof JetStreamApiError && error.code === WRONG_LAST_SEQUENCE;

const acksOf = (results: readonly PromiseSettledResult<PubAck>[]) =>
  results.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));

const messagesOnSubject = async (jsm: JetStreamManager, subject: string): Promise<number> => {
  const info = await jsm.streams.info(STREAM, { subjects_filter: subject });
  return info.state.subjects?.[subject] ?? 0;
};

/**
 * One race: optionally seeds the subject (so the expectation is non-zero), then starts
 * `writers` appends all expecting the same last sequence. Exactly one must be
 * acknowledged and every other one rejected with 10071; the subject then holds exactly
 * the seed and the winner.
 */
const raceOnce = async (
  jsm: JetStreamManager,
  clients: readonly JetStreamClient[],
  subject: string,
  race: (typeof RACES)[number],
) => {
  let expected = 0;
  if (race.expectation === 'non-zero') {
    expected = (
      await clients[0]!.publish(subject, encoder.encode('seed'), { expect: { lastSubjectSequence: 0 } })
    ).seq;
  }
  const results = await Promise.all(
    racingAppends(clients, subject, expected, race.writers, {
      label: subject,
      timeoutMs: PUBLISH_TIMEOUT_MS,
    }),
  );
  const acks = acksOf(results);
  const rejections = results.flatMap((result) => (result.status === 'rejected' ? [result.reason] : []));
  expect(acks).toHaveLength(1);
  expect(rejections.filter((reason) => !isWrongLastSequence(reason))).toEqual([]);
  expect(await messagesOnSubject(jsm, subject)).toBe(race.expectation === 'zero' ? 1 : 2);
};

interface JszStreamState {
  readonly messages: number;
  readonly bytes: number;
  readonly first_seq: number;
  readonly last_seq: number;
  readonly num_subjects?: number;
}

/** The stream's state as one node holds it locally (the monitor port answers for its own server only). */
const localStreamState = async (server: NatsServerHandle): Promise<JszStreamState | undefined> => {
  const response = await fetch(`${server.monitorUrl}/jsz?streams=true`, {
    signal: AbortSignal.timeout(1_000),
  });
  const jsz = (await response.json()) as {
    account_details?: { stream_detail?: { name: string; state: JszStreamState }[] }[];
  };
  const detail = jsz.account_details
    ?.flatMap((account) => account.stream_detail ?? [])
    .find((s) => s.name === STREAM);
  if (!detail) return undefined;
  const { messages, bytes, first_seq, last_seq, num_subjects } = detail.state;
  return { messages, bytes, first_seq, last_seq, num_subjects };
};

// ---------------------------------------------------------------------------------------
// One server

describe('one server, R1 file stream', () => {
  const server = useNats();
  let nc: NatsConnection;
  let writers: NatsConnection[];
  let jsm: JetStreamManager;
  let clients: JetStreamClient[];

  beforeAll(async () => {
    nc = await connectTo([server().url], 'guarantees-admin');
    jsm = await jetstreamManager(nc);
    await createStream(jsm, 1);
    // Several connections, so racing appends arrive on different sockets as separate writers' would.
    writers = await Promise.all([1, 2, 3, 4].map((i) => connectTo([server().url], `guarantees-writer-${i}`)));
    clients = writers.map((writer) => jetstream(writer));
  });

  afterAll(async () => {
    await Promise.all([nc, ...(writers ?? [])].filter(Boolean).map((c) => c.close()));
  });

  test('rejects an append whose expected last subject sequence is stale, with JetStream error 10071', async () => {
    const js = clients[0]!;
    const subject = 'g.stale';
    const first = await js.publish(subject, encoder.encode('a'), { expect: { lastSubjectSequence: 0 } });
    const second = await js.publish(subject, encoder.encode('b'), {
      expect: { lastSubjectSequence: first.seq },
    });

    const stale = await js
      .publish(subject, encoder.encode('c'), { expect: { lastSubjectSequence: first.seq } })
      .then(
        () => undefined,
        (error: unknown) => error,
      );

    expect(stale).toBeInstanceOf(JetStreamApiError);
    const apiError = stale as JetStreamApiError;
    expect(apiError.code).toBe(WRONG_LAST_SEQUENCE);
    expect(apiError.status).toBe(400);
    expect(apiError.apiError()).toEqual({
      code: 400,
      err_code: WRONG_LAST_SEQUENCE,
      description: `wrong last sequence: ${second.seq}`,
    });
    expect(apiError.message).toBe(`wrong last sequence: ${second.seq}`);
    expect(await messagesOnSubject(jsm, subject)).toBe(2);
  });

  test('rejects an expectation of 0 (subject must be empty) once the subject holds a message', async () => {
    const js = clients[0]!;
    const subject = 'g.not-empty';
    const first = await js.publish(subject, encoder.encode('a'), { expect: { lastSubjectSequence: 0 } });
    const again = await js.publish(subject, encoder.encode('b'), { expect: { lastSubjectSequence: 0 } }).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(again).toBeInstanceOf(JetStreamApiError);
    expect((again as JetStreamApiError).apiError()).toEqual({
      code: 400,
      err_code: WRONG_LAST_SEQUENCE,
      description: `wrong last sequence: ${first.seq}`,
    });
  });

  test.each(RACES)(
    'acknowledges exactly one of $writers concurrent appends expecting a $expectation last subject sequence',
    async (race) => {
      for (let trial = 0; trial < TRIALS_SINGLE; trial++) {
        await raceOnce(jsm, clients, `g.race.r1.${race.writers}.${race.expectation}.${trial}`, race);
      }
    },
  );
});

describe.each([
  { syncAlways: false, mode: 'default sync' },
  { syncAlways: true, mode: 'sync_interval: always' },
])('one server, kill -9 ($mode)', ({ syncAlways }) => {
  const server = useNats({ syncAlways });

  test('every acknowledged publish is read back after kill -9 and a restart on the same store', async () => {
    const before = await connectTo([server().url], 'guarantees-durability');
    const acked: { seq: number; subject: string; data: string }[] = [];
    try {
      const jsm = await jetstreamManager(before);
      await createStream(jsm, 1);
      const js = jetstream(before);
      const pending = Array.from({ length: DURABILITY_MESSAGES }, async (_, i) => {
        const subject = `g.durable.${i % 10}`;
        const data = `durable-${i}`;
        const ack = await js.publish(subject, encoder.encode(data));
        acked.push({ seq: ack.seq, subject, data });
      });
      await Promise.all(pending);
      // A conditional append too, acknowledged just before the crash.
      const last = await js.publish('g.durable.cas', encoder.encode('cas'), {
        expect: { lastSubjectSequence: 0 },
      });
      acked.push({ seq: last.seq, subject: 'g.durable.cas', data: 'cas' });
      await server().kill9();
    } finally {
      await before.close();
    }

    await server().restart();
    const after = await connectTo([server().url], 'guarantees-durability-after');
    try {
      const jsm = await jetstreamManager(after);
      const info = await jsm.streams.info(STREAM);
      expect(info.state.messages).toBe(acked.length);
      expect(info.state.last_seq).toBe(Math.max(...acked.map((a) => a.seq)));
      for (const { seq, subject, data } of acked) {
        const stored = await jsm.streams.getMessage(STREAM, { seq });
        expect({
          seq: stored?.seq,
          subject: stored?.subject,
          data: stored ? decoder.decode(stored.data) : undefined,
        }).toEqual({ seq, subject, data });
      }
    } finally {
      await after.close();
    }
  });
});

// ---------------------------------------------------------------------------------------
// A 3-node cluster

describe('3-node cluster, R3 file stream', () => {
  const cluster = useNatsCluster(3, { syncAlways: true });
  let admin: NatsConnection;
  let jsm: JetStreamManager;
  let writers: NatsConnection[];
  let clients: JetStreamClient[];

  beforeAll(async () => {
    admin = await connectTo(cluster().urls, 'guarantees-cluster-admin');
    jsm = await jetstreamManager(admin);
    await createStream(jsm, 3);
    // One writer per node: appends reach the stream leader through every server, as in #4320.
    writers = await Promise.all(
      cluster().nodes.map((node, i) => connectTo([node.url], `guarantees-cluster-writer-${i}`)),
    );
    clients = writers.map((writer) => jetstream(writer));
  });

  afterAll(async () => {
    await Promise.all([admin, ...(writers ?? [])].filter(Boolean).map((c) => c.close()));
  });

  test.each(RACES)(
    'acknowledges exactly one of $writers concurrent appends expecting a $expectation last subject sequence',
    async (race) => {
      for (let trial = 0; trial < TRIALS_CLUSTER; trial++) {
        await raceOnce(jsm, clients, `g.race.r3.${race.writers}.${race.expectation}.${trial}`, race);
      }
    },
  );

  test('acknowledges at most one racing append while the stream leader is killed -9, and the replicas agree after', async () => {
    const nodes = cluster().nodes;
    const acked: { seq: number; subject: string; data: string }[] = [];
    const perRound: Record<string, number | string>[] = [];
    let winners = 0;

    for (let round = 0; round < FAILOVER_ROUNDS; round++) {
      const leaderName = await streamLeader(jsm);
      const leader = nodes.find((node) => node.serverName === leaderName);
      if (!leader)
        throw new Error(`stream leader ${leaderName} is none of ${nodes.map((n) => n.serverName)}`);
      // The writers sit on the survivors, so that what they see is the failover, not their own reconnect.
      const survivors = await Promise.all(
        nodes
          .filter((node) => node !== leader)
          .map((node, i) => connectTo([node.url], `failover-${round}-${i}`)),
      );
      try {
        const js = survivors.map((nc) => jetstream(nc));
        const subject = `g.failover.${round}`;
        const seed = await js[0]!.publish(subject, encoder.encode('seed'), {
          expect: { lastSubjectSequence: 0 },
        });
        acked.push({ seq: seed.seq, subject, data: 'seed' });

        // No API check on creation: the meta leader may be the node about to be killed.
        const survivorJsm = await jetstreamManager(survivors[0]!, {
          checkAPI: false,
          timeout: API_POLL_TIMEOUT_MS,
        });
        const options = { timeoutMs: FAILOVER_PUBLISH_TIMEOUT_MS };
        // Some appends are decided before the kill, some are in flight as it lands, some meet the failover.
        const first = racingAppends(js, subject, seed.seq, FAILOVER_WRITERS_FIRST, {
          ...options,
          label: 'first',
        });
        await Promise.race(first);
        const inFlight = racingAppends(js, subject, seed.seq, FAILOVER_WRITERS_IN_FLIGHT, {
          ...options,
          label: 'flight',
        });
        await leader.kill9();
        const killedAtMs = Date.now();
        const during = racingAppends(js, subject, seed.seq, FAILOVER_WRITERS_DURING, {
          ...options,
          label: 'during',
        });
        // The survivors elect a new leader while the unanswered appends time out.
        const [results, electionMs] = await Promise.all([
          Promise.all([...first, ...inFlight, ...during]),
          streamLeader(survivorJsm, leader.serverName).then(() => Date.now() - killedAtMs),
        ]);

        const acks = acksOf(results);
        const rejections = results.flatMap((result) => (result.status === 'rejected' ? [result.reason] : []));
        const wrongLast = rejections.filter(isWrongLastSequence).length;
        perRound.push({
          round,
          killed: leader.serverName,
          acks: acks.length,
          wrongLast,
          unanswered: rejections.length - wrongLast,
          electionMs,
        });
        expect(acks.length).toBeLessThanOrEqual(1);
        winners += acks.length;

        // The old leader comes back on its store and catches up.
        await leader.restart();
        await cluster().waitHealthy();

        // Unanswered appends may have been stored too, but never more than one: they all expected seed.seq.
        const stored = await messagesOnSubject(survivorJsm, subject);
        expect(stored).toBeLessThanOrEqual(2);
        if (acks.length === 1) {
          const winner = acks[0]!;
          expect(stored).toBe(2);
          const last = await survivorJsm.streams.getMessage(STREAM, { last_by_subj: subject });
          expect(last?.seq).toBe(winner.seq);
          acked.push({ seq: winner.seq, subject, data: decoder.decode(last!.data) });
        }
      } finally {
        await Promise.all(survivors.map((nc) => nc.close()));
      }
    }
    console.info(`leader kill -9 rounds: ${JSON.stringify(perRound)}`);
    // Otherwise the rounds above could have passed by everyone timing out.
    expect(winners).toBeGreaterThan(0);

    const states = await eventually(
      'the three replicas to hold the same stream state',
      REPLICAS_AGREE_WAIT_MS,
      async () => {
        const views = await Promise.all(nodes.map(localStreamState));
        const first = JSON.stringify(views[0]);
        return views[0] && views.every((view) => JSON.stringify(view) === first) ? views : undefined;
      },
    );
    expect(states).toHaveLength(3);
    expect(states[0]?.last_seq).toBe((await jsm.streams.info(STREAM)).state.last_seq);

    for (const { seq, subject, data } of acked) {
      const stored = await jsm.streams.getMessage(STREAM, { seq });
      expect({ subject: stored?.subject, data: stored ? decoder.decode(stored.data) : undefined }).toEqual({
        subject,
        data,
      });
    }
  });
});

/** The stream's current RAFT leader, once there is one (and it is not `notName`, a node just killed). */
const streamLeader = (jsm: JetStreamManager, notName?: string): Promise<string> =>
  eventually('a stream leader', LEADER_WAIT_MS, async () => {
    const leader = (await jsm.streams.info(STREAM)).cluster?.leader;
    return leader && leader !== notName ? leader : undefined;
  });
