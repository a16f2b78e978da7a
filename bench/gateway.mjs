// `npm run bench:gateway`: the gateway's throughput, latency, memory and cold start, each
// next to the raw JetStream figure it is built on, all measured in one run on one
// nats-server. The gateway runs as its own process; the load comes from this one.
// Knobs: see `settings` below and bench/README.md. `--quick` is a smoke run.

import { spawn } from 'node:child_process';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { createLeaseClient } from '@lease/client';
import {
  ADMISSION_SUBJECT,
  COMMAND_SUBJECTS,
  leaseSubject,
  SNAPSHOT_BUCKET,
  SNAPSHOT_OBJECT,
  STREAM_NAME,
} from '@lease/events';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Objm } from '@nats-io/obj';
import {
  buildInfo,
  call,
  collectedMemory,
  connect,
  cpuText,
  encode,
  fencingTokenFloor,
  fmt,
  GC_PROBE_ARGS,
  printTable,
  progress,
  publishPipelined,
  quick,
  Recorder,
  root,
  runBench,
  runLoad,
  SECRET_HASH,
  serviceStats,
  settings,
  settledRssBytes,
  sleep,
  startNats,
  startService,
  summarize,
  verdict,
  withCpu,
} from './lib.mjs';

const S = settings({
  BENCH_SECONDS: [5, 1], // each throughput phase
  BENCH_CONCURRENCY: [100, 20], // the "concurrent" column of the gateway phases
  BENCH_RAW_IN_FLIGHT: [256, 256],
  BENCH_LEASES: [100_000, 5_000], // live leases for the memory figure and the cold start
  BENCH_GRANT_CONCURRENCY: [500, 200], // acquires in flight while granting them
  BENCH_HISTORY: [1_000_000, 50_000], // events in the log before the cold starts
  BENCH_TAIL: [10_000, 1_000], // events appended after the snapshot, replayed on top of it
  BENCH_COLD_RUNS: [3, 1], // cold starts from the snapshot (median reported)
  BENCH_RSS_SETTLE_S: [10, 2], // RSS is the lowest sample over this long after granting (half before)
  BENCH_TIMEOUT_S: [1_200, 240],
});
const TARGET = { renewRatio: 0.6, acquireP50Ms: 1, bytesPerLease: 1024, coldStartMs: 1_000 };
const LIMIT = 'bench';
const SECRET = 's'.repeat(32);
const SERVICE = 'lease-gateway';

/** Conditional appends on `lanes` subjects of the RAW stream, each lane chaining its own last sequence. */
const rawConditional = async (js, lanes, seconds, tag) => {
  const recorder = new Recorder();
  const payload = encode({ type: 'LeaseRenewed', v: 1, atMs: Date.now(), leaseId: 'x'.repeat(32), ttlMs: 1 });
  const last = new Array(lanes).fill(0);
  const load = await runLoad({
    concurrency: lanes,
    seconds,
    op: async (lane) => {
      const ack = await recorder.time('publish', () =>
        js.publish(`raw.${tag}.${lane}`, payload, { expect: { lastSubjectSequence: last[lane] } }),
      );
      last[lane] = ack.seq;
    },
  });
  return { ...load, latency: recorder.stats('publish'), errors: recorder.errorSummary() };
};

const acquireBody = (requester, ttlMs) => ({
  requester,
  slots: [{ limit: LIMIT, count: 1 }],
  ttlMs,
  holderSecret: SECRET,
});

/** Acquire then release, back to back, one requester per worker. */
const acquireRelease = async (nc, concurrency, seconds, tag) => {
  const recorder = new Recorder();
  const load = await runLoad({
    concurrency,
    seconds,
    op: async (w) => {
      const { lease } = await recorder.time('acquire', () =>
        call(nc, COMMAND_SUBJECTS.acquire, acquireBody(`${tag}-${w}`, 60_000)),
      );
      await recorder.time('release', () =>
        call(nc, COMMAND_SUBJECTS.release, { leaseId: lease.leaseId, holderSecret: SECRET }),
      );
    },
  });
  return { ...load, acquire: recorder.stats('acquire'), release: recorder.stats('release'), recorder };
};

/**
 * Each worker renews its own lease back to back: through the SDK (`client`: renewals
 * asked for in one turn of the event loop leave in one renew-many request), or with one
 * raw request per renewal (no client given).
 */
const renewLoop = async (nc, concurrency, seconds, tag, client) => {
  const leases = await Promise.all(
    Array.from({ length: concurrency }, (_, w) =>
      client
        ? client.acquire(acquireBody(`${tag}-${w}`, 3_600_000))
        : call(nc, COMMAND_SUBJECTS.acquire, acquireBody(`${tag}-${w}`, 3_600_000)).then((r) => r.lease),
    ),
  );
  const recorder = new Recorder();
  const load = await runLoad({
    concurrency,
    seconds,
    op: async (w) => {
      if (client) leases[w] = await recorder.time('renew', () => client.renew(leases[w]));
      else
        await recorder.time('renew', () =>
          call(nc, COMMAND_SUBJECTS.renew, { leaseId: leases[w].leaseId, holderSecret: SECRET }),
        );
    },
  });
  await Promise.all(
    leases.map((lease) =>
      call(nc, COMMAND_SUBJECTS.release, { leaseId: lease.leaseId, holderSecret: SECRET }),
    ),
  );
  return { ...load, renew: recorder.stats('renew'), recorder };
};

/** `count` live leases through the gateway, `inFlight` acquires at a time (a retry replays by idempotency key). */
const grantMany = async (nc, count, inFlight) => {
  let next = 0;
  let failures = 0;
  const started = performance.now();
  const lane = async () => {
    while (next < count && failures < 1_000) {
      const i = next++;
      const body = { ...acquireBody(`live-${i}`, 3_600_000), idempotencyKey: `live-${i}` };
      for (let attempt = 0; attempt < 4; attempt++) {
        try {
          await call(nc, COMMAND_SUBJECTS.acquire, body, 30_000);
          break;
        } catch {
          failures += 1;
          await sleep(50);
        }
      }
    }
  };
  await Promise.all(Array.from({ length: inFlight }, lane));
  return { seconds: (performance.now() - started) / 1000, failures };
};

/** Spawn to "gateway ready": the process's wall time and what it logged. */
const coldStart = async (env) => {
  const gateway = startService('gateway', env);
  const ready = await gateway.waitFor('gateway ready', 180_000);
  // Newer gateways log when they begin replaying: before it, process start, connect and snapshot load.
  const replaying = gateway.lines.find((entry) => String(entry.line.msg).startsWith('replaying the log'));
  const beforeReplayMs = replaying ? replaying.at - gateway.spawnedAt : Number.NaN;
  return { gateway, wallMs: ready.at - gateway.spawnedAt, beforeReplayMs, ...ready.line };
};

/** The floor under any cold start: a node process that only loads the gateway's modules. */
const importFloorMs = () =>
  new Promise((resolve, reject) => {
    const started = performance.now();
    const entry = join(root, 'services', 'gateway', 'dist', 'index.js');
    const child = spawn(
      process.execPath,
      ['--input-type=module', '-e', `await import(${JSON.stringify(entry)})`],
      {
        stdio: 'ignore',
      },
    );
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      if (code === 0) resolve(performance.now() - started);
      else reject(new Error(`importing the gateway exited with ${code}`));
    });
  });

/** Grant + release pairs straight to the stream, the way growHistory writes them. */
const growHistory = async (js, jsm, events, label) => {
  const floor = await fencingTokenFloor(jsm);
  const now = Date.now();
  return publishPipelined(
    js,
    events,
    (i) => {
      const n = i >> 1;
      const leaseId = `${label}-${n}`;
      if (i % 2 === 1)
        return {
          subject: leaseSubject(leaseId),
          data: encode({ type: 'LeaseReleased', v: 1, atMs: now, leaseId }),
        };
      const grant = {
        leaseId,
        requester: leaseId,
        slots: [{ limit: 'history', count: 1 }],
        ttlMs: 60_000,
        deadlineMs: now + 60_000,
        fencingToken: floor + n + 1,
        secretHash: SECRET_HASH,
      };
      return {
        subject: ADMISSION_SUBJECT,
        data: encode({ type: 'LeasesGranted', v: 1, atMs: now, grants: [grant] }),
      };
    },
    512,
  );
};

const median = (values) => summarize(values).p50;

await runBench('bench:gateway', S.BENCH_TIMEOUT_S * 1000, async () => {
  const build = buildInfo(); // what is measured: read before any service starts
  const C = S.BENCH_CONCURRENCY;
  const secs = S.BENCH_SECONDS;
  const nats = await startNats();
  progress(`nats-server at ${nats.url} (pid ${nats.pid}), store ${nats.storeDir}${quick ? ' (quick)' : ''}`);
  // Raw publishes go through a connection opened as the services open theirs (connectBus);
  // the gateway is driven through a lean one (see lib.mjs connect).
  const busNc = await connect(nats.url, 'bench-raw');
  const leanNc = await connect(nats.url, 'bench-raw-lean', { lean: true });
  const nc = await connect(nats.url, 'bench-gateway', { lean: true });
  const js = jetstream(busNc);
  const jsm = await jetstreamManager(busNc);

  progress('raw JetStream conditional publish');
  await jsm.streams.add({ name: 'RAW', subjects: ['raw.>'], storage: 'file', num_replicas: 1 });
  await rawConditional(js, 16, Math.min(1, secs), 'warm');
  const raw1 = await withCpu({ nats: nats.pid }, () => rawConditional(js, 1, secs, 'seq'));
  const rawN = await withCpu({ nats: nats.pid }, () =>
    rawConditional(js, S.BENCH_RAW_IN_FLIGHT, secs, 'pipe'),
  );
  const rawLean = await withCpu({ nats: nats.pid }, () =>
    rawConditional(jetstream(leanNc), S.BENCH_RAW_IN_FLIGHT, secs, 'lean'),
  );

  const gatewayEnv = { NATS_URL: nats.url, SNAPSHOT_EVERY_MS: '3600000' };
  let gateway = startService('gateway', gatewayEnv);
  await gateway.waitFor('gateway ready', 60_000);
  progress(`gateway pid ${gateway.pid}`);
  const pids = { gateway: gateway.pid, nats: nats.pid };
  // BENCH_RENEW_BATCH sets the SDK's renewBatchMax (its default otherwise): ADR 0010's sweep.
  const renewBatchMax = process.env.BENCH_RENEW_BATCH ? Number(process.env.BENCH_RENEW_BATCH) : undefined;
  const client = createLeaseClient({ nc, timeoutMs: 10_000, ...(renewBatchMax ? { renewBatchMax } : {}) });
  await client.defineLimit({ limit: LIMIT, slotsMax: 1_000_000 });
  await client.defineLimit({ limit: 'history', slotsMax: 1_000 });

  progress('warm-up');
  await acquireRelease(nc, 10, Math.min(1, secs), 'warm');
  await renewLoop(nc, 10, Math.min(1, secs), 'warmr');
  await renewLoop(nc, 10, Math.min(1, secs), 'warms', client);

  progress('acquire+release and renew at concurrency 1 and C');
  const ar1 = await withCpu(pids, () => acquireRelease(nc, 1, secs, 'ar1'));
  const arC = await withCpu(pids, () => acquireRelease(nc, C, secs, 'arC'));
  const rn1 = await withCpu(pids, () => renewLoop(nc, 1, secs, 'rn1'));
  const rnC = await withCpu(pids, () => renewLoop(nc, C, secs, 'rnC'));
  const rsC = await withCpu(pids, () => renewLoop(nc, C, secs, 'rsC', client));
  // The raw figure again, right after: the ratio's denominator is the mean of both, and
  // their difference shows how much the shared machine moved meanwhile.
  const rawAfter = await withCpu(pids, () => rawConditional(js, S.BENCH_RAW_IN_FLIGHT, secs, 'after'));
  const rawMean = (rawN.perSecond + rawAfter.perSecond) / 2;
  await gateway.stop();

  progress(`a fresh gateway, then ${S.BENCH_LEASES} live leases granted through it`);
  gateway = startService('gateway', gatewayEnv, { extraArgs: GC_PROBE_ARGS });
  await gateway.waitFor('gateway ready', 60_000);
  const rssBefore = await settledRssBytes(gateway.pid, S.BENCH_RSS_SETTLE_S * 500);
  const gcBefore = await collectedMemory(gateway);
  const granting = await withCpu({ gateway: gateway.pid, nats: nats.pid }, () =>
    grantMany(nc, S.BENCH_LEASES, S.BENCH_GRANT_CONCURRENCY),
  );
  const rssAfter = await settledRssBytes(gateway.pid, S.BENCH_RSS_SETTLE_S * 1000);
  const gcAfter = await collectedMemory(gateway);
  const perLeaseCollected = (gcAfter.rss - gcBefore.rss) / S.BENCH_LEASES;
  const heapPerLease = (gcAfter.heapUsed - gcBefore.heapUsed) / S.BENCH_LEASES;
  const afterGrants = await serviceStats(nc, SERVICE);
  const perLease = (rssAfter - rssBefore) / S.BENCH_LEASES;
  await gateway.stop();

  const lastSeq = (await jsm.streams.info(STREAM_NAME)).state.last_seq;
  const grow = Math.max(0, S.BENCH_HISTORY - lastSeq);
  progress(`growing the log from ${lastSeq} to ${lastSeq + grow + (grow % 2)} events`);
  const growStarted = performance.now();
  await growHistory(js, jsm, grow + (grow % 2), 'old');
  const growS = (performance.now() - growStarted) / 1000;

  const snapshots = await new Objm(nc).create(SNAPSHOT_BUCKET);
  await snapshots.delete(SNAPSHOT_OBJECT).catch(() => undefined);
  progress('cold start without a snapshot');
  const noSnap = await coldStart({ ...gatewayEnv, SNAPSHOT_EVERY_MS: '100', SNAPSHOT_MIN_EVENTS: '1' });
  // A gateway snapshots only once SNAPSHOT_MIN_EVENTS events were folded after its start: give it one.
  await acquireRelease(nc, 1, 0.05, 'nudge');
  const written = await noSnap.gateway.waitFor('snapshot written', 60_000);
  await noSnap.gateway.stop();
  await growHistory(js, jsm, S.BENCH_TAIL, 'tail');
  const totalEvents = (await jsm.streams.info(STREAM_NAME)).state.last_seq;

  progress('cold starts from the snapshot');
  const fromSnap = [];
  for (let run = 0; run < S.BENCH_COLD_RUNS; run++) {
    const started = await coldStart(gatewayEnv);
    fromSnap.push(started);
    gateway = started.gateway;
    if (run === S.BENCH_COLD_RUNS - 1) Object.assign(started, { stats: await serviceStats(nc, SERVICE) });
    await gateway.stop();
  }
  const snapWall = median(fromSnap.map((r) => r.wallMs));
  const snapReplay = median(fromSnap.map((r) => r.replayMs));
  const lastStats = fromSnap.at(-1).stats;

  const floorMs = median([await importFloorMs(), await importFloorMs(), await importFloorMs()]);

  const renewRatio = rsC.perSecond / rawMean;
  const errors = [
    ...[ar1, arC, rn1, rnC, rsC].map((r) => r.recorder.errorSummary()),
    ...[raw1, rawN, rawLean, rawAfter].map((r) => r.errors && `raw: ${r.errors}`),
  ]
    .filter(Boolean)
    .join('; ');
  const cpu = (r) => cpuText(r.cpu, ['gateway', 'nats', 'bench', 'others']);
  const perOpUs = (r, ops) => `${Math.round((r.cpu.gateway * r.elapsedS * 1e6) / ops)} us gateway CPU per op`;
  printTable(
    `bench:gateway  (${new Date().toISOString()}, ${build}, ${quick ? 'QUICK, ' : ''}${secs} s per phase; ` +
      `gateway, nats-server and this load generator are 3 processes on ${cpus().length} cores)`,
    [
      [
        'raw conditional publish, 1 in flight',
        fmt.rate(raw1.perSecond),
        '',
        '',
        fmt.lat(raw1.latency),
        cpu(raw1),
      ],
      [
        `raw conditional publish, ${S.BENCH_RAW_IN_FLIGHT} in flight`,
        fmt.rate(rawN.perSecond),
        '',
        '',
        fmt.lat(rawN.latency),
        cpu(rawN),
      ],
      [
        `raw conditional publish, ${S.BENCH_RAW_IN_FLIGHT} in flight, noAsyncTraces client`,
        fmt.rate(rawLean.perSecond),
        '',
        '',
        `${fmt.lat(rawLean.latency)}; the same server, a client without async stack traces`,
        cpu(rawLean),
      ],
      [
        'acquire+release, concurrency 1',
        `${fmt.rate(ar1.perSecond)} cycles`,
        '',
        '',
        `acquire ${fmt.lat(ar1.acquire)}; release ${fmt.lat(ar1.release)}`,
        cpu(ar1),
      ],
      [
        `acquire+release, concurrency ${C}`,
        `${fmt.rate(arC.perSecond)} cycles`,
        '',
        '',
        `acquire ${fmt.lat(arC.acquire)}; release ${fmt.lat(arC.release)}; ${perOpUs(arC, arC.ops * 2)}`,
        cpu(arC),
      ],
      ['renew, concurrency 1', fmt.rate(rn1.perSecond), '', '', fmt.lat(rn1.renew), cpu(rn1)],
      [
        `renew, concurrency ${C}, one request per renewal`,
        fmt.rate(rnC.perSecond),
        '',
        '',
        `${fmt.lat(rnC.renew)}; ${perOpUs(rnC, rnC.ops)}`,
        cpu(rnC),
      ],
      [
        `renew, concurrency ${C}, through the SDK`,
        fmt.rate(rsC.perSecond),
        '',
        '',
        `${fmt.lat(rsC.renew)}; ${perOpUs(rsC, rsC.ops)}; renewals asked in one turn leave in one renew-many request`,
        cpu(rsC),
      ],
      [
        `raw conditional publish, ${S.BENCH_RAW_IN_FLIGHT} in flight, right after`,
        fmt.rate(rawAfter.perSecond),
        '',
        '',
        `${fmt.pct(rawAfter.perSecond / rawN.perSecond)} of the first measurement (the machine's drift); gateway idle`,
        cpu(rawAfter),
      ],
      [
        `renew @${C} through the SDK / raw @${S.BENCH_RAW_IN_FLIGHT} (mean of both)`,
        fmt.pct(renewRatio),
        '>= 60 %',
        verdict(renewRatio >= TARGET.renewRatio),
        `one request per renewal @${C}: ${fmt.pct(rnC.perSecond / rawMean)}; renew @1 / raw @1: ${fmt.pct(rn1.perSecond / raw1.perSecond)}; ` +
          `acquire+release @${C}: ${fmt.pct((2 * arC.perSecond) / rawMean)} (2 appends per cycle); ` +
          `SDK renew @${C} / raw noAsyncTraces: ${fmt.pct(rsC.perSecond / rawLean.perSecond)}`,
      ],
      [
        'acquire p50, concurrency 1',
        fmt.ms(ar1.acquire.p50),
        '< 1 ms',
        verdict(ar1.acquire.p50 < TARGET.acquireP50Ms),
        `raw publish p50 @1: ${fmt.ms(raw1.latency.p50)} (acquire = ${(ar1.acquire.p50 / raw1.latency.p50).toFixed(1)}x)`,
      ],
      [
        `gateway RSS, +${fmt.count(S.BENCH_LEASES)} live leases, after a full GC`,
        `${fmt.count(perLeaseCollected)} B/lease`,
        '<= 1 KB',
        verdict(perLeaseCollected <= TARGET.bytesPerLease),
        `fresh gateway ${fmt.bytes(gcBefore.rss)} -> ${fmt.bytes(gcAfter.rss)} VmRSS; V8 heap used ${fmt.count(heapPerLease)} B/lease; live ${afterGrants.liveLeases}; ` +
          `granted at ${fmt.rate(S.BENCH_LEASES / granting.seconds)} (${S.BENCH_GRANT_CONCURRENCY} acquires in flight)`,
        cpu(granting),
      ],
      [
        `gateway RSS, +${fmt.count(S.BENCH_LEASES)} live leases, as found`,
        `${fmt.count(perLease)} B/lease`,
        '',
        '',
        `${fmt.bytes(rssBefore)} -> ${fmt.bytes(rssAfter)}, lowest over ${S.BENCH_RSS_SETTLE_S} s idle with no forced GC (includes garbage the GC had not returned)`,
      ],
      [
        `cold start, no snapshot (${fmt.count(noSnap.foldedSeq)} events)`,
        fmt.ms(noSnap.wallMs),
        '',
        '',
        `replayMs ${noSnap.replayMs} (${fmt.rate(noSnap.foldedSeq / (noSnap.replayMs / 1000))} folded); ` +
          `spawn to replay start ${fmt.ms(noSnap.beforeReplayMs)}; live ${noSnap.liveLeases}`,
      ],
      [
        `cold start, snapshot + ${fmt.count(totalEvents - written.line.seq)} tail`,
        fmt.ms(snapWall),
        '< 1 s',
        verdict(snapWall < TARGET.coldStartMs),
        `median of ${fromSnap.length} (max ${fmt.ms(Math.max(...fromSnap.map((r) => r.wallMs)))}): ` +
          `spawn to replay start ${fmt.ms(median(fromSnap.map((r) => r.beforeReplayMs)))}, replayMs ${snapReplay}; ` +
          `snapshot ${fmt.bytes(written.line.bytes)} at seq ${written.line.seq}, written in ${written.line.tookMs} ms; ` +
          `node + gateway imports alone ${fmt.ms(floorMs)}`,
      ],
      [
        'cold start, snapshot / none',
        fmt.pct(snapWall / noSnap.wallMs),
        '',
        '',
        `wall time; replayMs ${fmt.pct(snapReplay / noSnap.replayMs)}`,
      ],
    ],
    ['CPU gateway / nats / bench / others'],
  );
  console.log(
    `log: ${fmt.count(totalEvents)} events (history written at ${fmt.rate((grow + (grow % 2)) / growS)}); ` +
      `anomalies after replay: ${lastStats?.anomalies}; live leases after replay: ${lastStats?.liveLeases}; ` +
      `failed requests: ${errors || 'none'}; grant failures: ${granting.failures}`,
  );
});
