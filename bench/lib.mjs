// Helpers shared by the benchmarks: settings, processes, load loops, percentiles, the table.
// Everything here talks only to 127.0.0.1 and every wait is bounded in count and time.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { connectBus, startLocalNats } from '@lease/bus';
import { ADMISSION_SUBJECT, STREAM_NAME } from '@lease/events';
import { connect as natsConnect } from '@nats-io/transport-node';

export const root = join(dirname(fileURLToPath(import.meta.url)), '..');
export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
export const now = () => performance.now();
const utf8 = new TextEncoder();
const utf8Decoder = new TextDecoder();

// ---------------------------------------------------------------------------------------
// Settings: env knobs with full-scale defaults; `--quick` swaps in small ones for a smoke run.

export const quick = process.argv.includes('--quick') || process.env.BENCH_QUICK === '1';

/** `spec` maps an env name to [full, quick] defaults; numbers only. */
export const settings = (spec) => {
  const out = {};
  for (const [name, [full, small]] of Object.entries(spec)) {
    const raw = process.env[name];
    const value = raw === undefined || raw === '' ? (quick ? small : full) : Number(raw);
    if (!Number.isFinite(value) || value < 0) throw new Error(`${name}=${raw} is not a non-negative number`);
    out[name] = value;
  }
  return out;
};

// ---------------------------------------------------------------------------------------
// Processes. Every child is killed when this process exits, even after a failure.

const children = new Set();
const cleanups = [];
process.once('exit', () => {
  for (const child of children) child.kill('SIGKILL');
});

/** Runs `main`, then stops everything it started; a watchdog bounds the whole run. */
export const runBench = async (name, timeoutMs, main) => {
  const watchdog = setTimeout(() => {
    console.error(`${name}: gave up after ${Math.round(timeoutMs / 1000)} s (BENCH_TIMEOUT_S)`);
    process.exit(2); // the 'exit' handlers kill the children and remove the nats stores
  }, timeoutMs);
  watchdog.unref();
  for (const signal of ['SIGINT', 'SIGTERM']) process.once(signal, () => process.exit(130));
  try {
    await main();
  } catch (error) {
    console.error(`${name} failed:`, error);
    process.exitCode = 1;
  } finally {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
    clearTimeout(watchdog);
  }
};

/** A nats-server of its own on loopback, with a temporary store; stopped at the end. */
export const startNats = async () => {
  const nats = await startLocalNats();
  cleanups.push(() => nats.stop());
  return nats;
};

/**
 * A connection as the services open theirs (connectBus), or with `lean` a plain one without
 * async stack traces: the load generator uses that one, so that it takes less of the CPU
 * it shares with the gateway and nats-server.
 */
export const connect = async (url, name, { lean = false } = {}) => {
  const nc = lean
    ? await natsConnect({ servers: url, name, noAsyncTraces: true, maxReconnectAttempts: 10 })
    : await connectBus({ servers: url, name });
  cleanups.push(() => nc.close());
  return nc;
};

/**
 * A service (gateway, repossessor) as a separate node process, from its built entry
 * point. Its JSON log lines are kept so that callers can wait for one and read fields.
 * BENCH_NODE_ARGS_<NAME> (e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof") profiles it.
 */
export const startService = (name, env, { extraArgs = [] } = {}) => {
  const entry = join(root, 'services', name, 'dist', 'main.js');
  if (!existsSync(entry)) throw new Error(`${entry} is missing: build first (npm run build, or npm test)`);
  const nodeArgs = (process.env[`BENCH_NODE_ARGS_${name.toUpperCase()}`] ?? '').split(' ').filter(Boolean);
  const spawnedAt = now();
  const child = spawn(process.execPath, [...nodeArgs, ...extraArgs, entry], {
    env: { ...process.env, LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  const lines = [];
  let partial = '';
  const onData = (chunk) => {
    partial += chunk.toString();
    const parts = partial.split('\n');
    partial = parts.pop();
    for (const line of parts) {
      let parsed;
      try {
        parsed = JSON.parse(line);
      } catch {
        parsed = { msg: line };
      }
      lines.push({ at: now(), line: parsed });
      if (lines.length > 10_000) lines.shift();
    }
  };
  child.stdout.on('data', onData);
  child.stderr.on('data', onData);
  const exited = new Promise((resolve) => child.once('exit', resolve));
  exited.then(() => children.delete(child));

  const service = {
    name,
    pid: child.pid,
    spawnedAt,
    lines,
    /** The first log line (after `from`) whose msg contains `text`, with the time it was seen. */
    async waitFor(text, timeoutMs = 60_000, from = 0) {
      const deadline = now() + timeoutMs;
      for (;;) {
        const found = lines.slice(from).find((entry) => String(entry.line.msg).includes(text));
        if (found) return found;
        if (child.exitCode !== null || child.signalCode !== null)
          throw new Error(`${name} exited before "${text}":\n${tail(lines)}`);
        if (now() > deadline)
          throw new Error(`${name} did not log "${text}" in ${timeoutMs} ms:\n${tail(lines)}`);
        await sleep(2);
      }
    },
    /** SIGTERM, then SIGKILL after a bound. */
    async stop(graceMs = 5_000) {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const done = await Promise.race([exited.then(() => true), sleep(graceMs).then(() => false)]);
      if (!done) {
        child.kill('SIGKILL');
        await Promise.race([exited, sleep(graceMs)]);
      }
    },
  };
  cleanups.push(() => service.stop());
  return service;
};

const tail = (lines) =>
  lines
    .slice(-15)
    .map((entry) => JSON.stringify(entry.line))
    .join('\n');

/** Resident memory of a process, from /proc (Linux). */
export const rssBytes = (pid) => {
  const match = /VmRSS:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!match) throw new Error(`no VmRSS for pid ${pid}`);
  return Number(match[1]) * 1024;
};

const CLOCK_TICKS_PER_S = 100; // getconf CLK_TCK on Linux

/** CPU time (user + system) a process has used so far, in seconds, from /proc. */
export const cpuSeconds = (pid) => {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS_PER_S;
};

/**
 * Runs `fn` and reports how busy each process was meanwhile, in cores (1.0 = one core
 * all the time): `pids` maps a name to a pid; this process is "bench".
 */
export const withCpu = async (pids, fn) => {
  const before = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, cpuSeconds(pid)]));
  const self = process.cpuUsage();
  const machineBefore = machineBusySeconds();
  const started = now();
  const result = await fn();
  const wallS = (now() - started) / 1000;
  const cpu = Object.fromEntries(
    Object.entries(pids).map(([name, pid]) => [name, (cpuSeconds(pid) - before[name]) / wallS]),
  );
  const used = process.cpuUsage(self);
  cpu.bench = (used.user + used.system) / 1e6 / wallS;
  const ours = Object.values(cpu).reduce((a, b) => a + b, 0);
  // Everything else running on this shared machine meanwhile (other users' work, the kernel).
  cpu.others = Math.max(0, (machineBusySeconds() - machineBefore) / wallS - ours);
  return { ...result, cpu };
};

/** CPU time the whole machine spent busy (all cores), from /proc/stat. */
const machineBusySeconds = () => {
  const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  const [user, nice, system, , , irq, softirq, steal] = fields;
  return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS_PER_S;
};

/** "gateway 97 / nats 40 / bench 35 %", in the order given. */
export const cpuText = (cpu, names = Object.keys(cpu)) =>
  `${names.map((name) => `${name} ${cpu[name] === undefined ? '-' : Math.round(cpu[name] * 100)}`).join(' / ')} %`;

/** What is being measured: the commit checked out and when the gateway's dist was built (read only). */
export const buildInfo = () => {
  let head = 'unknown';
  try {
    head = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: root, encoding: 'utf8' }).trim();
  } catch {}
  const dists = ['libs/events', 'libs/bus', 'libs/client', 'services/gateway', 'services/repossessor'];
  return `HEAD ${head}, built ${newestMtime(dists).toISOString().slice(0, 19)}Z`;
};

/** The newest modification time of the built JavaScript under `<package>/dist` (bounded walk). */
const newestMtime = (packages) => {
  let newest = new Date(0);
  const walk = (dir, depth) => {
    if (depth > 4 || !existsSync(dir)) return;
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path, depth + 1);
      else if (entry.name.endsWith('.js')) {
        const mtime = statSync(path).mtime;
        if (mtime > newest) newest = mtime;
      }
    }
  };
  for (const pkg of packages) walk(join(root, pkg, 'dist'), 0);
  return newest;
};

/** Node arguments that load bench/gc-probe.cjs into a service (see `collectedMemory`). */
export const GC_PROBE_ARGS = ['--expose-gc', '--require', join(root, 'bench', 'gc-probe.cjs')];

/**
 * Asks a service started with GC_PROBE_ARGS for a full GC, then reads its VmRSS: what
 * its live data holds. Also returns the heap figures the probe logged.
 */
export const collectedMemory = async (service) => {
  const from = service.lines.length;
  process.kill(service.pid, 'SIGUSR2');
  const logged = await service.waitFor('bench-gc', 10_000, from);
  await sleep(200);
  return { rss: rssBytes(service.pid), heapUsed: logged.line.heapUsed, external: logged.line.external };
};

/** The lowest resident memory seen over `ms` (sampled every 250 ms): garbage not yet collected counts less. */
export const settledRssBytes = async (pid, ms) => {
  let lowest = rssBytes(pid);
  for (let waited = 0; waited < ms; waited += 250) {
    await sleep(250);
    lowest = Math.min(lowest, rssBytes(pid));
  }
  return lowest;
};

// ---------------------------------------------------------------------------------------
// NATS calls.

export class RequestFailed extends Error {
  constructor(code, message) {
    super(`${code}: ${message}`);
    this.code = code;
  }
}

/**
 * One gateway command as a bare request/reply: JSON in, JSON out, no client-side
 * validation, so that the load loops measure the gateway rather than the SDK's zod.
 */
export const call = async (nc, subject, body, timeoutMs = 10_000) => {
  const reply = await nc.request(subject, utf8.encode(JSON.stringify(body)), { timeout: timeoutMs });
  const parsed = JSON.parse(utf8Decoder.decode(reply.data));
  if (!parsed.ok) throw new RequestFailed(parsed.error?.code ?? 'UNKNOWN', parsed.error?.message ?? '');
  return parsed.result;
};

/** The stats data of a NATS micro service (first endpoint's `data`), or the whole reply. */
export const serviceStats = async (nc, service) => {
  const reply = await nc.request(`$SRV.STATS.${service}`, undefined, { timeout: 5_000 });
  const stats = JSON.parse(utf8Decoder.decode(reply.data));
  return stats.endpoints?.[0]?.data ?? stats;
};

/** Waits until a service reports having folded at least `seq` (bounded). */
export const waitFolded = async (nc, service, seq, timeoutMs = 120_000) => {
  const deadline = now() + timeoutMs;
  for (;;) {
    const stats = await serviceStats(nc, service).catch(() => ({}));
    if ((stats.foldedSeq ?? -1) >= seq) return stats;
    if (now() > deadline) throw new Error(`${service} did not fold up to seq ${seq} in ${timeoutMs} ms`);
    await sleep(50);
  }
};

/**
 * Publishes `count` messages built by `build(i)` -> { subject, data } with a sliding
 * window of `inFlight` unacknowledged publishes (the way growHistory writes history).
 */
export const publishPipelined = async (js, count, build, inFlight = 256) => {
  let next = 0;
  let lastSeq = 0;
  const lane = async () => {
    while (next < count) {
      const { subject, data } = build(next++);
      const ack = await js.publish(subject, data, { timeout: 30_000 });
      if (ack.seq > lastSeq) lastSeq = ack.seq;
    }
  };
  await Promise.all(Array.from({ length: Math.min(inFlight, count) }, lane));
  return lastSeq;
};

/**
 * The highest fencing token in the log, as far as the last admission message shows it
 * (events written straight to the stream must keep tokens growing, or the fold refuses
 * them), and never below `known`, what this benchmark wrote itself.
 */
export const fencingTokenFloor = async (jsm, known = 0) => {
  const last = await jsm.streams
    .getMessage(STREAM_NAME, { last_by_subj: ADMISSION_SUBJECT })
    .catch(() => null);
  if (!last) return known;
  const event = JSON.parse(utf8Decoder.decode(last.data));
  const tokens = (event.grants ?? []).map((grant) => grant.fencingToken);
  return Math.max(known, ...tokens);
};

export const SECRET_HASH = 'c'.repeat(64);
export const encode = (value) => utf8.encode(JSON.stringify(value));
export const decode = (data) => JSON.parse(utf8Decoder.decode(data));

// ---------------------------------------------------------------------------------------
// Load loops and latency.

/** Latency samples (ms) per label, and counts of failures by code. */
export class Recorder {
  samples = new Map();
  errors = new Map();
  /** Times `fn`; a failure is counted by its code and rethrown. */
  async time(label, fn) {
    const started = now();
    try {
      const result = await fn();
      this.add(label, now() - started, started);
      return result;
    } catch (error) {
      const code = error.code ?? error.name ?? 'ERROR';
      this.errors.set(code, (this.errors.get(code) ?? 0) + 1);
      throw error;
    }
  }
  add(label, ms, startedAt = now()) {
    if (!this.samples.has(label)) this.samples.set(label, []);
    this.samples.get(label).push({ ms, at: startedAt });
  }
  stats(label, filter = () => true) {
    return summarize((this.samples.get(label) ?? []).filter(filter).map((s) => s.ms));
  }
  errorSummary() {
    return [...this.errors].map(([code, n]) => `${code} x${n}`).join(', ');
  }
}

export const percentile = (sorted, q) =>
  sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];

export const summarize = (values) => {
  const sorted = Float64Array.from(values).sort();
  return {
    n: sorted.length,
    p50: percentile(sorted, 0.5),
    p99: percentile(sorted, 0.99),
    max: sorted.length ? sorted[sorted.length - 1] : Number.NaN,
  };
};

/**
 * `concurrency` workers each run `op(worker)` back to back until `seconds` have passed or
 * `maxOps` operations were done (or `stopped()`); a worker whose op fails backs off briefly. Too many
 * failures end the run early (it is then reported, not hidden).
 */
export const runLoad = async ({
  concurrency,
  seconds,
  maxOps = 10_000_000,
  maxErrors = 1_000,
  stopped = () => false,
  op,
}) => {
  const started = now();
  const stopAt = started + seconds * 1000;
  let ops = 0;
  let errors = 0;
  const worker = async (w) => {
    while (now() < stopAt && ops < maxOps && errors < maxErrors && !stopped()) {
      try {
        await op(w);
        ops += 1;
      } catch {
        errors += 1;
        await sleep(5);
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, (_, w) => worker(w)));
  const elapsedS = (now() - started) / 1000;
  return { ops, errors, elapsedS, perSecond: ops / elapsedS };
};

// ---------------------------------------------------------------------------------------
// Output.

export const fmt = {
  rate: (perSecond) => `${Math.round(perSecond).toLocaleString('en-US')}/s`,
  ms: (value) => (Number.isNaN(value) ? 'n/a' : `${value < 10 ? value.toFixed(2) : value.toFixed(0)} ms`),
  pct: (ratio) => `${(ratio * 100).toFixed(0)} %`,
  bytes: (value) =>
    value >= 1024 * 1024 ? `${(value / 1024 / 1024).toFixed(1)} MiB` : `${Math.round(value)} B`,
  count: (value) => Math.round(value).toLocaleString('en-US'),
  lat: (s) => `p50 ${fmt.ms(s.p50)} / p99 ${fmt.ms(s.p99)}`,
};

/** "PASS"/"MISS" for a figure against a target, or '' when there is no target. */
export const verdict = (ok) => (ok === undefined ? '' : ok ? 'PASS' : 'MISS');

/** Prints rows of [figure, value, target, verdict, detail, ...extra columns] as one aligned table. */
export const printTable = (title, rows, extraHeader = []) => {
  const header = ['figure', 'measured', 'target', '', 'detail', ...extraHeader];
  const all = [header, ...rows.map((row) => row.map((cell) => String(cell ?? '')))];
  const widths = header.map((_, i) => Math.max(...all.map((row) => (row[i] ?? '').length)));
  const line = (row) => `| ${row.map((cell, i) => (cell ?? '').padEnd(widths[i])).join(' | ')} |`;
  console.log(`\n${title}\n`);
  console.log(line(header));
  console.log(`|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`);
  for (const row of all.slice(1)) console.log(line(row));
  console.log('');
};

export const progress = (text) => {
  if (process.env.BENCH_QUIET !== '1') console.error(`[${new Date().toISOString().slice(11, 23)}] ${text}`);
};
