// `npm run bench:expiry`: how late the repossessor revokes expired leases, with many live
// leases around, and what a burst of expiries does to acquire latency. nats-server,
// gateway and repossessor run as their own processes; leases are written straight to
// the stream (as the gateway's group commits write them) so that their deadlines are
// exact; each revocation's delay is its stream timestamp minus (deadline + grace).
// Knobs: see `settings` below and bench/README.md. `--quick` is a smoke run.
import { cpus } from 'node:os';
import { createLeaseClient } from '@lease/client';
import { ADMISSION_SUBJECT, COMMAND_SUBJECTS, LEASE_SUBJECT_PREFIX, STREAM_NAME } from '@lease/events';
import { DeliverPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import {
  buildInfo,
  call,
  connect,
  cpuText,
  decode,
  encode,
  fencingTokenFloor,
  fmt,
  now,
  printTable,
  progress,
  publishPipelined,
  quick,
  Recorder,
  runBench,
  runLoad,
  SECRET_HASH,
  serviceStats,
  settings,
  sleep,
  startNats,
  startService,
  summarize,
  verdict,
  waitFolded,
  withCpu,
} from './lib.mjs';

const S = settings({
  BENCH_LIVE: [100_000, 5_000], // live leases (1 h TTL) present throughout
  BENCH_EXPIRING: [20_000, 2_000], // leases expiring one after another...
  BENCH_SPREAD_MS: [20_000, 4_000], // ...with deadlines spread evenly over this window
  BENCH_BURST: [10_000, 2_000], // leases expiring at the same instant
  BENCH_GRACE_MS: [500, 500], // the repossessor's GRACE_MS
  BENCH_LEAD_MS: [5_000, 3_000], // from writing leases to their first deadline
  BENCH_IDLE_SECONDS: [5, 2], // acquire probe with nothing expiring, before each burst
  BENCH_BURST_RUNS: [3, 1],
  BENCH_TIMEOUT_S: [900, 180],
});
const TARGET = { delayP99Ms: 100, burstClearMs: 2_000, acquireP99Ratio: 2 };
const PEER_ETCD_REVOKES_PER_S = 1_000;
const LIMIT = 'bench';
const SECRET = 's'.repeat(32);
const GRANTS_PER_MESSAGE = 250;
const cpu = (r) => cpuText(r.cpu, ['gateway', 'repossessor', 'nats', 'bench', 'others']);
const grace = S.BENCH_GRACE_MS;

/** `count` grants straight to the admission subject, GRANTS_PER_MESSAGE per message. */
const writeGrants = async (js, jsm, count, prefix, deadlineOf) => {
  const floor = await fencingTokenFloor(jsm);
  const atMs = Date.now();
  const messages = Math.ceil(count / GRANTS_PER_MESSAGE);
  await publishPipelined(
    js,
    messages,
    (m) => {
      const grants = [];
      for (let i = m * GRANTS_PER_MESSAGE; i < Math.min(count, (m + 1) * GRANTS_PER_MESSAGE); i++) {
        const deadlineMs = deadlineOf(i);
        grants.push({
          leaseId: `${prefix}-${i}`,
          requester: `${prefix}-${i}`,
          slots: [{ limit: LIMIT, count: 1 }],
          ttlMs: Math.max(1, deadlineMs - atMs),
          deadlineMs,
          fencingToken: floor + i + 1,
          secretHash: SECRET_HASH,
        });
      }
      return { subject: ADMISSION_SUBJECT, data: encode({ type: 'LeasesGranted', v: 1, atMs, grants }) };
    },
    32,
  );
  return (await jsm.streams.info(STREAM_NAME)).state.last_seq;
};

/**
 * Follows the per-lease subjects with an ordered consumer and keeps, for every
 * LeaseRevoked, its lease id, the deadline it enforced and when it was stored.
 */
const watchRevocations = async (js, fromSeq) => {
  const revoked = new Map();
  const consumer = await js.consumers.get(STREAM_NAME, {
    filter_subjects: [`${LEASE_SUBJECT_PREFIX}.>`],
    deliver_policy: DeliverPolicy.StartSequence,
    opt_start_seq: fromSeq,
  });
  const messages = await consumer.consume({ max_messages: 4_096 });
  const running = (async () => {
    for await (const message of messages) {
      const event = decode(message.data);
      if (event.type !== 'LeaseRevoked') continue;
      revoked.set(event.leaseId, {
        deadlineMs: event.deadlineMs,
        storedMs: Number(message.info.timestampNanos) / 1e6,
        // The fencing of a renewal-free lease: its revocation must name seq 0.
        decidedAgainstSeq: event.decidedAgainstSeq,
      });
    }
  })();
  return {
    revoked,
    count: (prefix) => [...revoked.keys()].filter((id) => id.startsWith(prefix)).length,
    of: (prefix) => [...revoked].filter(([id]) => id.startsWith(prefix)).map(([, r]) => r),
    async stop() {
      await messages.close();
      await running.catch(() => undefined);
    },
  };
};

/** Waits (bounded) until `count` leases with `prefix` are revoked; true when they all were. */
const waitRevoked = async (watch, prefix, count, untilMs) => {
  while (Date.now() < untilMs) {
    if (watch.count(prefix) >= count) return true;
    await sleep(20);
  }
  return watch.count(prefix) >= count;
};

/** acquire then release through the gateway, one at a time, until `stop()`; acquires are timed. */
const probeAcquires = (nc, recorder, label) => {
  let stopping = false;
  let n = 0;
  const running = runLoad({
    concurrency: 1,
    seconds: 600,
    maxOps: 1_000_000,
    stopped: () => stopping,
    op: async () => {
      const requester = `probe-${label}-${n++}`;
      const body = { requester, slots: [{ limit: LIMIT, count: 1 }], ttlMs: 60_000, holderSecret: SECRET };
      const { lease } = await recorder.time(label, () => call(nc, COMMAND_SUBJECTS.acquire, body));
      await call(nc, COMMAND_SUBJECTS.release, { leaseId: lease.leaseId, holderSecret: SECRET });
    },
  });
  return async () => {
    stopping = true;
    await running;
  };
};

await runBench('bench:expiry', S.BENCH_TIMEOUT_S * 1000, async () => {
  const build = buildInfo(); // what is measured: read before any service starts
  const nats = await startNats();
  progress(`nats-server at ${nats.url} (pid ${nats.pid})${quick ? ' (quick)' : ''}`);
  const nc = await connect(nats.url, 'bench-expiry', { lean: true });
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  const env = { NATS_URL: nats.url, SNAPSHOT_EVERY_MS: '3600000', GRACE_MS: String(grace) };
  const gateway = startService('gateway', env);
  await gateway.waitFor('gateway ready', 60_000);
  const client = createLeaseClient({ nc, timeoutMs: 10_000 });
  await client.defineLimit({ limit: LIMIT, slotsMax: 1_000_000 });
  const repossessor = startService('repossessor', env);
  await repossessor.waitFor('repossessor ready', 60_000);
  progress(`gateway pid ${gateway.pid}, repossessor pid ${repossessor.pid}`);
  const pids = { gateway: gateway.pid, repossessor: repossessor.pid, nats: nats.pid };

  progress(`${S.BENCH_LIVE} live leases (1 h)`);
  const liveSeq = await writeGrants(js, jsm, S.BENCH_LIVE, 'live', () => Date.now() + 3_600_000);
  await waitFolded(nc, 'lease-gateway', liveSeq);
  await sleep(1_000); // the repossessor reports no fold position (no endpoint stats): give it a moment

  progress('warm-up');
  const probes = new Recorder();
  await runLoad({
    concurrency: 1,
    seconds: 0.5,
    op: () =>
      call(nc, COMMAND_SUBJECTS.acquire, {
        requester: `warm-${Math.random()}`,
        slots: [{ limit: LIMIT, count: 1 }],
        ttlMs: 60_000,
        holderSecret: SECRET,
      }).then((r) => call(nc, COMMAND_SUBJECTS.release, { leaseId: r.lease.leaseId, holderSecret: SECRET })),
  });
  const watch = await watchRevocations(js, (await jsm.streams.info(STREAM_NAME)).state.last_seq + 1);

  const n = S.BENCH_EXPIRING;
  progress(`${n} leases expiring over ${S.BENCH_SPREAD_MS} ms`);
  const t0 = Date.now() + S.BENCH_LEAD_MS;
  const spreadSeq = await writeGrants(
    js,
    jsm,
    n,
    'spread',
    (i) => t0 + Math.floor((i * S.BENCH_SPREAD_MS) / n),
  );
  const spreadWrittenMs = Date.now() - (t0 - S.BENCH_LEAD_MS);
  await waitFolded(nc, 'lease-gateway', spreadSeq);
  await sleep(Math.max(0, t0 + grace - Date.now()));
  const spreadWait = await withCpu(pids, async () => ({
    all: await waitRevoked(watch, 'spread-', n, t0 + S.BENCH_SPREAD_MS + grace + 30_000),
  }));
  const spread = watch.of('spread-');
  const spreadDelay = summarize(spread.map((r) => r.storedMs - (r.deadlineMs + grace)));
  const spreadRate =
    spread.length /
    ((Math.max(...spread.map((r) => r.storedMs)) - Math.min(...spread.map((r) => r.storedMs))) / 1000);

  // Bursts: an idle acquire probe, then `b` leases expiring at one instant with the probe
  // running. Samples are pooled over the runs; a burst's window is from its due time
  // (deadline + grace) to its last revocation.
  const b = S.BENCH_BURST;
  const offset = Date.now() - now(); // the recorder's clock is performance.now()
  const bursts = [];
  for (let run = 0; run < S.BENCH_BURST_RUNS; run++) {
    progress(`burst ${run + 1}/${S.BENCH_BURST_RUNS}: idle probe, then ${b} leases expiring at one instant`);
    const stopIdle = probeAcquires(nc, probes, 'idle');
    await sleep(S.BENCH_IDLE_SECONDS * 1000);
    await stopIdle();
    const deadline = Date.now() + S.BENCH_LEAD_MS;
    const prefix = `burst${run}`;
    const burstSeq = await writeGrants(js, jsm, b, prefix, () => deadline);
    const writtenMs = Date.now() - (deadline - S.BENCH_LEAD_MS);
    await waitFolded(nc, 'lease-gateway', burstSeq);
    const stopProbe = probeAcquires(nc, probes, `burst-${run}`);
    const due = deadline + grace;
    await sleep(Math.max(0, due - Date.now()));
    // How far the gateway's fold trails the log while the burst is revoked.
    let lagMax = 0;
    let sampling = true;
    const sampler = (async () => {
      for (let i = 0; sampling && i < 3_000; i++) {
        const [info, stats] = await Promise.all([
          jsm.streams.info(STREAM_NAME),
          serviceStats(nc, 'lease-gateway').catch(() => undefined),
        ]);
        if (stats?.foldedSeq !== undefined) lagMax = Math.max(lagMax, info.state.last_seq - stats.foldedSeq);
        await sleep(20);
      }
    })();
    const waited = await withCpu(pids, async () => ({
      all: await waitRevoked(watch, `${prefix}-`, b, due + 60_000),
    }));
    sampling = false;
    await sampler;
    await sleep(200);
    await stopProbe();
    const revoked = watch.of(`${prefix}-`);
    const clearMs = Math.max(...revoked.map((r) => r.storedMs)) - due;
    bursts.push({
      ...waited,
      writtenMs,
      lagMax,
      revoked: revoked.length,
      firstMs: Math.min(...revoked.map((r) => r.storedMs)) - due,
      clearMs,
      delay: summarize(revoked.map((r) => r.storedMs - due)),
      inWindow: (sample) => sample.at + offset >= due && sample.at + offset <= due + clearMs,
    });
  }
  const idle = probes.stats('idle');
  const duringSamples = bursts.flatMap((burst, run) =>
    (probes.samples.get(`burst-${run}`) ?? []).filter(burst.inWindow).map((sample) => sample.ms),
  );
  const during = summarize(duringSamples);
  const acquireRatio = during.p99 / idle.p99;
  const worst = bursts.reduce((a, c) => (c.clearMs > a.clearMs ? c : a));
  const allBurstsRevoked = bursts.every((burst) => burst.all);

  await watch.stop();
  const gatewayStats = await serviceStats(nc, 'lease-gateway');
  const repossessorStats = await serviceStats(nc, 'lease-repossessor').catch((e) => ({ error: e.message }));
  const stale = [...watch.revoked.values()].filter((r) => r.decidedAgainstSeq !== 0).length;

  printTable(
    `bench:expiry  (${new Date().toISOString()}, ${build}, ${quick ? 'QUICK, ' : ''}GRACE_MS ${grace}, ` +
      `${fmt.count(S.BENCH_LIVE)} live leases throughout; nats-server, gateway, repossessor and this process on ${cpus().length} cores)`,
    [
      [
        `revocation delay, ${fmt.count(n)} expiring over ${S.BENCH_SPREAD_MS / 1000} s`,
        `p99 ${fmt.ms(spreadDelay.p99)}`,
        '< 100 ms',
        verdict(spreadWait.all && spreadDelay.p99 < TARGET.delayP99Ms),
        `p50 ${fmt.ms(spreadDelay.p50)}, max ${fmt.ms(spreadDelay.max)}; ${spread.length}/${n} revoked; ` +
          `offered ${fmt.rate(n / (S.BENCH_SPREAD_MS / 1000))}, achieved ${fmt.rate(spreadRate)}`,
        cpu(spreadWait),
      ],
      ...bursts.map((burst, run) => [
        `burst ${run + 1}: ${fmt.count(b)} due at one instant, all revoked after`,
        fmt.ms(burst.clearMs),
        '< 2 s',
        verdict(burst.all && burst.clearMs < TARGET.burstClearMs),
        `${burst.revoked}/${b} revoked; first after ${fmt.ms(burst.firstMs)}; delay ${fmt.lat(burst.delay)}; ` +
          `${fmt.rate(burst.revoked / ((burst.clearMs - burst.firstMs) / 1000))} while clearing; gateway fold lag up to ${fmt.count(burst.lagMax)} events`,
        cpu(burst),
      ]),
      [
        'peer: etcd lease expiry',
        `~${fmt.rate(PEER_ETCD_REVOKES_PER_S)}`,
        '',
        '',
        `a ${fmt.count(b)} burst would take etcd ~${(b / PEER_ETCD_REVOKES_PER_S).toFixed(0)} s; the worst burst here took ` +
          `${fmt.pct(worst.clearMs / 1000 / (b / PEER_ETCD_REVOKES_PER_S))} of that${allBurstsRevoked ? '' : ' (NOT all revoked)'}`,
      ],
      [
        'acquire, idle (nothing expiring)',
        `p99 ${fmt.ms(idle.p99)}`,
        '',
        '',
        `p50 ${fmt.ms(idle.p50)}, n=${idle.n}`,
      ],
      [
        'acquire, while bursts are revoked',
        `p99 ${fmt.ms(during.p99)}`,
        '',
        '',
        `p50 ${fmt.ms(during.p50)}, max ${fmt.ms(during.max)}, n=${during.n} (pooled over ${bursts.length} bursts)`,
      ],
      [
        'acquire p99, burst / idle',
        `${acquireRatio.toFixed(1)}x`,
        '<= 2x',
        verdict(during.n > 0 && acquireRatio <= TARGET.acquireP99Ratio),
        `p50 ratio ${(during.p50 / idle.p50).toFixed(1)}x` +
          (during.n < 100
            ? `; only ${during.n} acquires fell in the burst windows: p99 is near their max`
            : ''),
      ],
    ],
    ['CPU gateway / repossessor / nats / bench / others'],
  );
  console.log(
    `leases written in ${spreadWrittenMs} ms (expiring) and ${bursts.map((burst) => burst.writtenMs).join('/')} ms (bursts), lead ${S.BENCH_LEAD_MS} ms; ` +
      `gateway: live ${gatewayStats.liveLeases}, anomalies ${gatewayStats.anomalies}; revocations naming a non-zero seq: ${stale}; ` +
      `repossessor $SRV.STATS data: ${repossessorStats.revoked === undefined ? 'none (the service has no endpoint, so its statsHandler is never called)' : JSON.stringify(repossessorStats)}; ` +
      `probe failures: ${probes.errorSummary() || 'none'}`,
  );
});
