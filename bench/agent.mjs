// `npm run bench:agent`: the worker-agent's figures (issue 6).
// 1. Kill latency: from the lease's loss to the last process of the workload's tree gone,
//    p50/p99 over BENCH_RUNS runs each, for two kinds of loss:
//    - an admin revocation, measured from the moment this process hears the LeaseRevoked
//      event (the agent hears the same event; it does not wait for its next renewal);
//    - the local deadline, with the gateway frozen (SIGSTOP) so that renewals go
//      unanswered, measured from the gateway's deadline of the last renewal (the agent's
//      local deadline is up to one request latency earlier, so this slightly flatters).
//    The tree is a shell, a child and a grandchild (all leave on SIGTERM); the grace before
//    SIGKILL is BENCH_GRACE_MS, so a workload that ignores SIGTERM takes about that much longer.
// 2. Cost: the agent's (and its watchdog's) CPU and RSS while supervising BENCH_WORKLOADS
//    `sleep` workloads that renew every second (TTL 3 s).
// nats-server, gateway and agent run as their own processes on 127.0.0.1. `--quick` is a smoke run.
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLeaseClient } from '@lease/client';
import { decodeEvent, leaseSubject } from '@lease/events';
import { agentSubjects, isRunning } from '@lease/worker-agent';
import {
  connect,
  cpuSeconds,
  fmt,
  now,
  printTable,
  progress,
  rssBytes,
  runBench,
  serviceStats,
  settings,
  sleep,
  startNats,
  startService,
  summarize,
} from './lib.mjs';

const S = settings({
  BENCH_RUNS: [50, 5], // runs per kind of loss
  BENCH_WORKLOADS: [500, 50], // supervised at once for the cost figure
  BENCH_MEASURE_S: [20, 5], // how long the cost is measured once all run
  BENCH_GRACE_MS: [2_000, 2_000], // the agent's AGENT_KILL_GRACE_MS
  BENCH_TIMEOUT_S: [900, 240],
});
const SLEEP = '/usr/bin/sleep';
const TREE_SCRIPT = `
echo $$ >> "$1"
sleep 1000 &
echo $! >> "$1"
sh -c 'sleep 1000 & echo $! >> "$1"; wait' child "$1" &
echo $! >> "$1"
wait
`;

/** Polls until a condition holds, bounded. */
const until = async (check, timeoutMs, what, intervalMs = 2) => {
  const deadline = now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await sleep(intervalMs);
  }
};

const readPids = (file, count) =>
  until(
    async () => {
      const text = await readFile(file, 'utf8').catch(() => '');
      const pids = [...new Set(text.split('\n').filter(Boolean).map(Number))];
      return pids.length >= count ? pids : undefined;
    },
    10_000,
    `pids in ${file}`,
    5,
  );

/** Wall-clock time at which no pid of the list runs any more (polled every millisecond). */
const goneAt = (pids) =>
  until(() => (pids.every((pid) => !isRunning(pid)) ? Date.now() : 0), 20_000, 'tree gone', 1);

const watchLease = (nc, leaseId) => {
  const events = [];
  const sub = nc.subscribe(leaseSubject(leaseId), {
    callback: (error, msg) => {
      if (error) return;
      const decoded = decodeEvent(msg.data);
      if (decoded.ok) events.push({ event: decoded.event, heardAtMs: Date.now() });
    },
  });
  return {
    events,
    of: (type) => events.filter((entry) => entry.event.type === type),
    stop: () => sub.unsubscribe(),
  };
};

const askRun = async (nc, workerId, body) => {
  const reply = await nc.request(agentSubjects(workerId).run, JSON.stringify(body), { timeout: 30_000 });
  const parsed = reply.json();
  if (!parsed.ok) throw new Error(`run refused: ${parsed.error.code}: ${parsed.error.message}`);
  return parsed.result;
};

await runBench('bench:agent', S.BENCH_TIMEOUT_S * 1000, async () => {
  const dir = await mkdtemp(join(tmpdir(), 'bench-agent-'));
  try {
    const tree = join(dir, 'tree.sh');
    await writeFile(tree, TREE_SCRIPT);
    const jobsFile = join(dir, 'jobs.json');
    await writeFile(
      jobsFile,
      JSON.stringify({
        jobs: {
          tree: { command: '/bin/sh', args: [tree], argPatterns: [`${dir}/[0-9]+\\.pids`], argsMax: 1 },
        },
        allowCommands: [SLEEP],
      }),
    );
    const nats = await startNats();
    const gateway = startService('gateway', { NATS_URL: nats.url, TTL_MIN_MS: '100', LOG_LEVEL: 'info' });
    await gateway.waitFor('gateway ready');
    const nc = await connect(nats.url, 'bench-agent');
    const client = createLeaseClient({ nc, timeoutMs: 5_000 });
    await client.defineLimit({ limit: 'bench', slotsMax: 10_000 });
    await client.setRequesterLimit({ requester: 'bench', leasesMax: 100_000 });
    const workerId = 'bench-agent';
    const agent = startService('worker-agent', {
      NATS_URL: nats.url,
      WORKER_ID: workerId,
      AGENT_STATE_DIR: join(dir, 'state'),
      AGENT_JOBS_FILE: jobsFile,
      AGENT_KILL_GRACE_MS: String(S.BENCH_GRACE_MS),
      AGENT_WORKLOADS_MAX: String(Math.max(1_000, S.BENCH_WORKLOADS)),
      LOG_LEVEL: 'info',
    });
    const ready = await agent.waitFor('worker-agent ready');
    const watchdogPid = ready.line.watchdog;
    const rows = [];

    // 1a. Revocation -> tree gone.
    const revokeMs = [];
    for (let i = 0; i < S.BENCH_RUNS; i++) {
      const file = join(dir, `${i}.pids`);
      const started = await askRun(nc, workerId, {
        job: 'tree',
        args: [file],
        requester: 'bench',
        slots: [{ limit: 'bench', count: 1 }],
        ttlMs: 6_000,
        initialTtlMs: 6_000,
      });
      const pids = await readPids(file, 4);
      const lease = watchLease(nc, started.leaseId);
      await client.revoke({ leaseId: started.leaseId, reason: 'admin' });
      const revoked = await until(() => lease.of('LeaseRevoked')[0], 5_000, 'revocation event', 1);
      const gone = await goneAt(pids);
      lease.stop();
      revokeMs.push(gone - revoked.heardAtMs);
    }
    const revokeStats = summarize(revokeMs);
    progress(`revocation -> gone: ${fmt.lat(revokeStats)} (n=${revokeStats.n})`);
    rows.push([
      'revocation event -> last process gone',
      fmt.lat(revokeStats),
      '< 1 s',
      '',
      `n=${revokeStats.n}, max ${fmt.ms(revokeStats.max)}`,
    ]);

    // 1b. Local deadline (gateway frozen) -> tree gone.
    const deadlineMs = [];
    for (let i = 0; i < S.BENCH_RUNS; i++) {
      const file = join(dir, `${10_000 + i}.pids`);
      const ttlMs = 1_000;
      const started = await askRun(nc, workerId, {
        job: 'tree',
        args: [file],
        requester: 'bench',
        slots: [{ limit: 'bench', count: 1 }],
        ttlMs,
        initialTtlMs: ttlMs,
      });
      const pids = await readPids(file, 4);
      const lease = watchLease(nc, started.leaseId);
      // Freeze the gateway just after a renewal whose answer the agent has read.
      const seen = lease.of('LeaseRenewed').length;
      await until(() => lease.of('LeaseRenewed').length > seen, 5_000, 'a renewal', 1);
      await sleep(50);
      process.kill(gateway.pid, 'SIGSTOP');
      try {
        const last = lease.of('LeaseRenewed').at(-1).event.deadlineMs;
        const gone = await goneAt(pids);
        deadlineMs.push(gone - last);
      } finally {
        process.kill(gateway.pid, 'SIGCONT');
        lease.stop();
      }
      await sleep(200);
    }
    const deadlineStats = summarize(deadlineMs);
    progress(`local deadline -> gone: ${fmt.lat(deadlineStats)} (n=${deadlineStats.n})`);
    rows.push([
      'local deadline -> last process gone',
      fmt.lat(deadlineStats),
      '< 1 s',
      '',
      `n=${deadlineStats.n}, from the gateway's deadline, gateway SIGSTOPped`,
    ]);

    // 2. Cost of supervising many workloads.
    const count = S.BENCH_WORKLOADS;
    const startAt = now();
    let next = 0;
    const supervised = new Set();
    /** One `sleep 3600` under a 3 s lease renewed every second: a workload of the cost figure. */
    const runSleeper = () =>
      askRun(nc, workerId, {
        command: SLEEP,
        args: ['3600'],
        requester: 'bench',
        slots: [{ limit: 'bench', count: 1 }],
        ttlMs: 3_000,
        initialTtlMs: 3_000,
      });
    const liveOfThese = async () =>
      (await client.list({ holder: workerId, max: 1_000 })).leases.filter(
        (lease) => lease.status === 'live' && supervised.has(lease.leaseId),
      ).length;
    const lane = async () => {
      while (next < count) {
        next += 1;
        const started = await runSleeper();
        supervised.add(started.leaseId);
      }
    };
    await Promise.all(Array.from({ length: 32 }, lane));
    const startS = (now() - startAt) / 1000;
    progress(`${count} workloads started in ${startS.toFixed(1)} s`);
    await sleep(3_000); // let renewals settle into their rhythm
    const agentCpu0 = cpuSeconds(agent.pid);
    const watchdogCpu0 = cpuSeconds(watchdogPid);
    const gatewayCpu0 = cpuSeconds(gateway.pid);
    const renewals0 = (await serviceStats(nc, 'lease-gateway')).renewals;
    const t0 = now();
    await sleep(S.BENCH_MEASURE_S * 1000);
    const wallS = (now() - t0) / 1000;
    const agentCpu = (cpuSeconds(agent.pid) - agentCpu0) / wallS;
    const watchdogCpu = (cpuSeconds(watchdogPid) - watchdogCpu0) / wallS;
    const gatewayCpu = (cpuSeconds(gateway.pid) - gatewayCpu0) / wallS;
    const renewalsPerS = ((await serviceStats(nc, 'lease-gateway')).renewals - renewals0) / wallS;
    const status = (await nc.request(agentSubjects(workerId).status, '{}', { timeout: 5_000 })).json();
    const running = status.result.running.length;
    const live = await liveOfThese();
    rows.push([
      'agent CPU',
      `${(agentCpu * 100).toFixed(1)} % of a core`,
      '',
      '',
      `${running} workloads, ${fmt.rate(renewalsPerS)} renewals`,
    ]);
    rows.push(['agent RSS', fmt.bytes(rssBytes(agent.pid)), '', '', '']);
    rows.push([
      'watchdog CPU / RSS',
      `${(watchdogCpu * 100).toFixed(1)} % / ${fmt.bytes(rssBytes(watchdogPid))}`,
      '',
      '',
      'one watchdog for all workloads',
    ]);
    rows.push([
      'gateway CPU (for scale)',
      `${(gatewayCpu * 100).toFixed(1)} %`,
      '',
      '',
      `${live} of them live`,
    ]);
    rows.push(['start rate', fmt.rate(count / startS), '', '', `${count} run requests, 32 in flight`]);

    const stopAt = now();
    await agent.stop(30_000);
    rows.push([
      'agent stop (SIGTERM) with all running',
      fmt.ms(now() - stopAt),
      '',
      '',
      'every group ended, every lease released',
    ]);
    const left = await liveOfThese();
    rows.push(['live leases after stop', String(left), '0', left === 0 ? 'PASS' : 'MISS', '']);

    // 3. Every lease lost at once: the gateway frozen with all of them running.
    const agent2 = startService('worker-agent', {
      NATS_URL: nats.url,
      WORKER_ID: workerId,
      AGENT_STATE_DIR: join(dir, 'state'),
      AGENT_JOBS_FILE: jobsFile,
      AGENT_KILL_GRACE_MS: String(S.BENCH_GRACE_MS),
      AGENT_WORKLOADS_MAX: String(Math.max(1_000, S.BENCH_WORKLOADS)),
      LOG_LEVEL: 'info',
    });
    await agent2.waitFor('worker-agent ready');
    const lastDeadline = new Map();
    const renewedSub = nc.subscribe(`${leaseSubject('*')}`, {
      callback: (error, msg) => {
        if (error) return;
        const decoded = decodeEvent(msg.data);
        if (decoded.ok && decoded.event.type === 'LeaseRenewed')
          lastDeadline.set(decoded.event.leaseId, decoded.event.deadlineMs);
      },
    });
    const pidOf = new Map();
    next = 0;
    const lane2 = async () => {
      while (next < count) {
        next += 1;
        const started = await runSleeper();
        pidOf.set(started.leaseId, started.pid);
      }
    };
    await Promise.all(Array.from({ length: 32 }, lane2));
    await until(
      () => [...pidOf.keys()].every((leaseId) => lastDeadline.has(leaseId)),
      10_000,
      'a renewal of each',
      50,
    );
    await sleep(100);
    process.kill(gateway.pid, 'SIGSTOP');
    const deadlines = new Map([...pidOf.keys()].map((leaseId) => [leaseId, lastDeadline.get(leaseId)]));
    const goneAtOf = new Map();
    try {
      await until(
        () => {
          const t = Date.now();
          for (const [leaseId, pid] of pidOf)
            if (!goneAtOf.has(leaseId) && !isRunning(pid)) goneAtOf.set(leaseId, t);
          return goneAtOf.size === pidOf.size;
        },
        20_000,
        'all gone',
        2,
      );
    } finally {
      process.kill(gateway.pid, 'SIGCONT');
      renewedSub.unsubscribe();
    }
    const massStats = summarize([...goneAtOf].map(([leaseId, t]) => t - deadlines.get(leaseId)));
    rows.push([
      `local deadline -> gone, ${count} at once`,
      fmt.lat(massStats),
      '< 1 s',
      '',
      `max ${fmt.ms(massStats.max)}, gateway SIGSTOPped with all running`,
    ]);
    await agent2.stop(30_000);
    printTable(`worker-agent (grace ${S.BENCH_GRACE_MS} ms)`, rows);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
