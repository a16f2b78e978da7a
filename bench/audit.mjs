// Audit and replay rate of leasectl on a long log, next to the raw JetStream replay rate
// (ordered consumer, JSON.parse only) of the same server in the same run, and leasectl's
// peak RSS during the audit. `--quick` for a smoke run; BENCH_EVENTS sets the log length.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ensureLeaseStream } from '@lease/bus';
import { ADMISSION_SUBJECT, leaseSubject, STREAM_NAME } from '@lease/events';
import { DeliverPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import {
  connect,
  encode,
  fmt,
  now,
  printTable,
  progress,
  publishPipelined,
  root,
  runBench,
  SECRET_HASH,
  settings,
  sleep,
  startNats,
  verdict,
} from './lib.mjs';

const S = settings({
  BENCH_EVENTS: [1_000_000, 20_000],
  BENCH_TIMEOUT_S: [1_800, 300],
  BENCH_RSS_POLL_MS: [20, 20],
});
const TARGET_RATIO = 0.7;
const TARGET_RSS_BYTES = 200 * 1024 * 1024;
const REPLAY_BATCH = 4_096;
const CHILD_TIMEOUT_MS = 15 * 60_000;
const entry = join(root, 'services', 'leasectl', 'dist', 'main.js');
const utf8Decoder = new TextDecoder();

/** One LimitDefined, then grant/release pairs on distinct leases: the shape of a busy coordinator's history. */
const buildEvent = (atMs) => (i) => {
  if (i === 0) {
    return {
      subject: ADMISSION_SUBJECT,
      data: encode({ type: 'LimitDefined', v: 1, atMs, limit: 'bench', slotsMax: 1_000 }),
    };
  }
  const lease = Math.floor((i - 1) / 2);
  const leaseId = `b-${lease}`;
  if ((i - 1) % 2 === 0) {
    return {
      subject: ADMISSION_SUBJECT,
      data: encode({
        type: 'LeasesGranted',
        v: 1,
        atMs,
        grants: [
          {
            leaseId,
            requester: `r-${lease % 997}`,
            slots: [{ limit: 'bench', count: 1 }],
            ttlMs: 60_000,
            deadlineMs: atMs + 60_000,
            fencingToken: lease + 1,
            secretHash: SECRET_HASH,
          },
        ],
      }),
    };
  }
  return { subject: leaseSubject(leaseId), data: encode({ type: 'LeaseReleased', v: 1, atMs, leaseId }) };
};

/** The raw rate: an ordered consumer from the start, JSON.parse of each message, nothing else. */
const rawReplay = async (nc, lastSeq) => {
  const consumer = await jetstream(nc).consumers.get(STREAM_NAME, { deliver_policy: DeliverPolicy.All });
  const started = now();
  const messages = await consumer.consume({ max_messages: REPLAY_BATCH });
  let count = 0;
  for await (const message of messages) {
    JSON.parse(utf8Decoder.decode(message.data));
    count += 1;
    if (message.seq >= lastSeq) break;
  }
  const seconds = (now() - started) / 1000;
  await messages.close();
  return { count, seconds, perSecond: count / seconds };
};

const peakFromProc = (pid) => {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const hwm = /VmHWM:\s+(\d+)\s+kB/.exec(status);
    return hwm ? Number(hwm[1]) * 1024 : 0;
  } catch {
    return 0; // exited between polls
  }
};

/** Runs leasectl as a child; polls its peak RSS (VmHWM) while it runs. */
const runLeasectl = (url, args) =>
  new Promise((resolve, reject) => {
    const started = now();
    const child = spawn(process.execPath, [entry, '--json', ...args], {
      env: { ...process.env, NATS_URL: url },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    let peakRss = 0;
    child.stdout.on('data', (chunk) => {
      out += chunk.toString();
    });
    child.stderr.on('data', (chunk) => {
      err += chunk.toString();
    });
    const poll = setInterval(() => {
      peakRss = Math.max(peakRss, peakFromProc(child.pid));
    }, S.BENCH_RSS_POLL_MS);
    const killer = setTimeout(() => child.kill('SIGKILL'), CHILD_TIMEOUT_MS);
    child.once('error', reject);
    child.once('exit', (code) => {
      clearInterval(poll);
      clearTimeout(killer);
      resolve({ code, out, err, peakRss, seconds: (now() - started) / 1000 });
    });
  });

await runBench('bench:audit', S.BENCH_TIMEOUT_S * 1000, async () => {
  if (!existsSync(entry)) throw new Error(`${entry} is missing: build first (npx tsc -b)`);
  const nats = await startNats();
  const nc = await connect(nats.url, 'bench-audit');
  await ensureLeaseStream(nc);
  const jsm = await jetstreamManager(nc);

  progress(`writing ${fmt.count(S.BENCH_EVENTS)} events, 256 in flight`);
  const writeStarted = now();
  await publishPipelined(jetstream(nc), S.BENCH_EVENTS, buildEvent(Date.now()));
  const writeS = (now() - writeStarted) / 1000;
  const lastSeq = (await jsm.streams.info(STREAM_NAME)).state.last_seq;
  progress(`wrote ${fmt.count(lastSeq)} events in ${writeS.toFixed(1)} s`);

  // Start-up (node, connect, stream info) measured on its own, so the rates can exclude it.
  const baseline = await runLeasectl(nats.url, ['replay', '--at', '0']);
  if (baseline.code !== 0) throw new Error(`leasectl replay --at 0 failed: ${baseline.err}`);

  progress('raw replay (1)');
  const raw1 = await rawReplay(nc, lastSeq);
  progress('leasectl audit');
  const audit = await runLeasectl(nats.url, ['audit']);
  if (audit.code !== 0)
    throw new Error(`leasectl audit exited ${audit.code}: ${audit.err}\n${audit.out.slice(0, 2_000)}`);
  const auditReport = JSON.parse(audit.out);
  progress('leasectl replay');
  const replay = await runLeasectl(nats.url, ['replay', '--at', String(lastSeq)]);
  if (replay.code !== 0) throw new Error(`leasectl replay exited ${replay.code}: ${replay.err}`);
  const replayed = JSON.parse(replay.out);
  if (replayed.foldedSeq !== lastSeq)
    throw new Error(`replay folded up to ${replayed.foldedSeq}, not ${lastSeq}`);
  progress('raw replay (2)');
  const raw2 = await rawReplay(nc, lastSeq);
  await sleep(10);

  // The better of the two raw runs is the reference: the comparison errs against leasectl.
  const raw = Math.max(raw1.perSecond, raw2.perSecond);
  const auditRate = auditReport.eventsPerSecond;
  const auditWallRate = lastSeq / Math.max(0.001, audit.seconds - baseline.seconds);
  const replayRate = lastSeq / Math.max(0.001, replay.seconds - baseline.seconds);
  printTable(`leasectl on a log of ${fmt.count(lastSeq)} events (nats-server on 127.0.0.1, R1, file)`, [
    [
      'raw replay (ordered consumer + JSON.parse)',
      fmt.rate(raw),
      '',
      '',
      `runs ${fmt.rate(raw1.perSecond)} / ${fmt.rate(raw2.perSecond)}`,
    ],
    [
      'audit rate (inside leasectl)',
      fmt.rate(auditRate),
      `>= ${fmt.pct(TARGET_RATIO)} of raw`,
      verdict(auditRate >= TARGET_RATIO * raw),
      `${fmt.pct(auditRate / raw)} of raw; ${auditReport.findingCount} findings`,
    ],
    [
      'audit rate (process wall time - start-up)',
      fmt.rate(auditWallRate),
      `>= ${fmt.pct(TARGET_RATIO)} of raw`,
      verdict(auditWallRate >= TARGET_RATIO * raw),
      `${fmt.pct(auditWallRate / raw)} of raw; ${audit.seconds.toFixed(2)} s wall, start-up ${baseline.seconds.toFixed(2)} s`,
    ],
    [
      'replay --at <last> rate (wall - start-up)',
      fmt.rate(replayRate),
      `>= ${fmt.pct(TARGET_RATIO)} of raw`,
      verdict(replayRate >= TARGET_RATIO * raw),
      `${fmt.pct(replayRate / raw)} of raw; ${replay.seconds.toFixed(2)} s wall`,
    ],
    [
      'leasectl peak RSS during audit (VmHWM)',
      fmt.bytes(audit.peakRss),
      `< ${fmt.bytes(TARGET_RSS_BYTES)}`,
      verdict(audit.peakRss > 0 && audit.peakRss < TARGET_RSS_BYTES),
      `replay peak ${fmt.bytes(replay.peakRss)}; start-up alone ${fmt.bytes(baseline.peakRss)}`,
    ],
    [
      'history written (pipelined, 256 in flight)',
      fmt.rate(lastSeq / writeS),
      '',
      '',
      `${writeS.toFixed(1)} s`,
    ],
  ]);
});
