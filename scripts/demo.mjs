// The demo behind `npm run demo`: a lease's whole life on a real NATS JetStream, with the
// gateway and the repossessor running as separate processes. It starts its own local
// nats-server unless NATS_URL names one. Everything it starts, it stops.
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { connectBus, Projection, startLocalNats } from '@lease/bus';
import { createLeaseClient, withLease } from '@lease/client';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const say = (text) => console.log(`\n== ${text}`);
const show = (label, value) =>
  console.log(`   ${label}: ${typeof value === 'string' ? value : JSON.stringify(value)}`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const children = [];

const startService = async (name, env) => {
  const child = spawn(process.execPath, [join(root, 'services', name, 'dist', 'main.js')], {
    env: { ...process.env, LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  for (let waited = 0; !output.includes('ready'); waited += 20) {
    if (child.exitCode !== null || waited > 20_000) throw new Error(`${name} did not start:\n${output}`);
    await sleep(20);
  }
  return child;
};
const stopChild = (child) =>
  new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', resolve);
    child.kill('SIGTERM');
  });

let nats;
let nc;
try {
  let url = process.env.NATS_URL;
  if (!url) {
    nats = await startLocalNats();
    url = nats.url;
    say(`started a local nats-server with JetStream at ${url} (store ${nats.storeDir})`);
  } else say(`using the nats-server at ${url}`);

  const env = { NATS_URL: url, TTL_MIN_MS: '500', GRACE_MS: '300', TICK_MS: '50' };
  let gateway = await startService('gateway', env);
  const repossessor = await startService('repossessor', env);
  say(`gateway (pid ${gateway.pid}) and repossessor (pid ${repossessor.pid}) are running as processes`);

  nc = await connectBus({ servers: url, name: 'demo' });
  const client = createLeaseClient({ nc, timeoutMs: 2_000 });

  say('an operator defines a limit: 2 GPU slots');
  show('limit', await client.defineLimit({ limit: 'gpu', slotsMax: 2 }));

  say('alice and bob each take a slot; carol finds none free');
  const alice = await client.acquire({
    requester: 'alice',
    holder: 'host-1',
    slots: [{ limit: 'gpu', count: 1 }],
    ttlMs: 3_000,
  });
  const bob = await client.acquire({
    requester: 'bob',
    holder: 'host-2',
    slots: [{ limit: 'gpu', count: 1 }],
    ttlMs: 1_000,
  });
  show('alice', { leaseId: alice.leaseId, fencingToken: alice.fencingToken });
  show('bob', { leaseId: bob.leaseId, fencingToken: bob.fencingToken });
  await client
    .acquire({ requester: 'carol', slots: [{ limit: 'gpu', count: 1 }], ttlMs: 3_000 })
    .catch((error) => show('carol', `${error.code} (retryable: ${error.retryable})`));

  say('the gateway is killed with SIGKILL and restarted; alice keeps renewing through it');
  gateway.kill('SIGKILL');
  const downAt = Date.now();
  let renewed = alice;
  for (let attempt = 1; ; attempt++) {
    try {
      renewed = await client.renew(renewed);
      show(
        `renewal after ${Date.now() - downAt} ms`,
        `ok on attempt ${attempt}, deadline moved to ${new Date(renewed.deadlineMs).toISOString()}`,
      );
      break;
    } catch (error) {
      show(`renewal attempt ${attempt}`, `${error.code} (retryable: ${error.retryable}), retrying`);
      if (!error.retryable || attempt > 50) throw error;
      if (attempt === 1) gateway = await startService('gateway', env);
      await sleep(100);
    }
  }

  say("bob's host goes silent: nobody renews his lease; the repossessor revokes it after deadline + grace");
  let carol;
  const silentAt = Date.now();
  for (let attempt = 0; !carol && attempt < 100; attempt++) {
    carol = await client
      .acquire({ requester: 'carol', slots: [{ limit: 'gpu', count: 1 }], ttlMs: 3_000 })
      .catch(() => undefined);
    if (!carol) await sleep(50);
  }
  show(
    'carol got a slot',
    `${Date.now() - silentAt} ms later, fencing token ${carol?.fencingToken} (higher than bob's ${bob.fencingToken})`,
  );
  await client
    .renew(bob)
    .catch((error) =>
      show("bob's late renewal", `${error.code} (retryable: ${error.retryable}): he must stop`),
    );

  await client.release(renewed);
  await client.release(carol);
  show('alice and carol', 'released their slots');

  say('a job runs under withLease: renewed in the background, released when it ends');
  const result = await withLease(
    client,
    { requester: 'dave', slots: [{ limit: 'gpu', count: 1 }], ttlMs: 900 },
    async (signal, lease) => {
      show('job', `running under ${lease.leaseId}, fencing token ${lease.fencingToken}`);
      await sleep(1_500);
      return signal.aborted ? 'aborted' : 'finished while the lease was held';
    },
    { onRenewal: (lease) => show('renewed', `deadline ${new Date(lease.deadlineMs).toISOString()}`) },
  ).catch((error) => `not run: ${error.code}`);
  show('job result', result);

  say('an operator replays the log from scratch: the history, and the state it rebuilds');
  const projection = new Projection({
    js: jetstream(nc),
    jsm: await jetstreamManager(nc),
    onEvent: ({ seq, event }) => {
      const who =
        event.leaseId ??
        event.limit ??
        event.grants?.map((g) => `${g.requester}:${g.leaseId.slice(0, 8)}`).join(',') ??
        event.requester;
      const why =
        event.type === 'LeaseRevoked'
          ? ` reason=${event.reason} deadline=${new Date(event.deadlineMs).toISOString()} against seq ${event.decidedAgainstSeq}`
          : '';
      console.log(
        `   seq ${String(seq).padStart(3)}  ${new Date(event.atMs).toISOString()}  ${event.type.padEnd(14)} ${String(who).slice(0, 40)}${why}`,
      );
    },
  });
  await projection.start();
  await projection.stop();
  show(
    'limits',
    [...projection.state.limits].map(([name, limit]) => `${name} ${limit.used}/${limit.slotsMax} used`),
  );
  show('live leases', projection.state.liveCount);
  show('anomalies found by the fold', projection.state.anomalyCount);
  say('demo finished');
} catch (error) {
  console.error('demo failed:', error);
  process.exitCode = 1;
} finally {
  await nc?.close().catch(() => undefined);
  await Promise.all(children.map(stopChild));
  await nats?.stop();
}
