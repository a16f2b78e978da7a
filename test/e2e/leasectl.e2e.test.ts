import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { createLeaseClient } from '@lease/client';
import { ADMISSION_SUBJECT, encodeEvent, STREAM_NAME } from '@lease/events';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { startNats } from '../harness/nats.js';
import { type ServiceProcess, startService } from '../harness/processes.js';
import { connectTest, eventually } from '../harness/services.js';

const entry = join(import.meta.dirname, '../../services/leasectl/dist/main.js');
const RUN_TIMEOUT_MS = 30_000;

/** Runs the built leasectl as a process of its own; SIGKILLed if it outlives its bound. */
const leasectl = (env: Record<string, string>, ...argv: string[]) =>
  new Promise<{ code: number | null; out: string; err: string }>((resolve, reject) => {
    if (!existsSync(entry)) reject(new Error(`${entry} is missing: run npx tsc -b first`));
    const child = spawn(process.execPath, [entry, ...argv], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      err += chunk.toString();
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), RUN_TIMEOUT_MS);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, out, err });
    });
  });

describe('leasectl as a process, against the gateway as a process', () => {
  it('replays the state the gateway served at a sequence, audits the log, and fails the audit on an injected violation', async () => {
    const nats = await startNats();
    const nc = await connectTest(nats.url);
    let gateway: ServiceProcess | undefined;
    try {
      gateway = await startService('gateway', { NATS_URL: nats.url });
      const env = { NATS_URL: nats.url, LEASECTL_ACTOR: 'e2e-admin' };
      const client = createLeaseClient({ nc });
      const jsm = await jetstreamManager(nc);
      const lastSeq = async () => (await jsm.streams.info(STREAM_NAME)).state.last_seq;

      await client.defineLimit({ limit: 'gpu', slotsMax: 4 });
      await client.setRequesterLimit({ requester: '*', leasesMax: 2 });
      const a = await client.acquire({
        requester: 'team-a',
        slots: [{ limit: 'gpu', count: 2 }],
        ttlMs: 60_000,
      });
      const b = await client.acquire({
        requester: 'team-b',
        slots: [{ limit: 'gpu', count: 1 }],
        ttlMs: 60_000,
      });
      await client.renew(a);
      await client.release(b);
      // What the gateway answered with everything up to this sequence folded.
      const atSeq = await lastSeq();
      const served = { limits: (await client.listLimits()).limits, leases: (await client.list()).leases };

      await client.revoke({ leaseId: a.leaseId, reason: 'admin', detail: 'later' });
      await client.acquire({ requester: 'team-c', slots: [{ limit: 'gpu', count: 4 }], ttlMs: 60_000 });
      expect(await lastSeq()).toBeGreaterThan(atSeq);

      const replay = await leasectl(env, '--json', 'replay', '--at', String(atSeq));
      expect(replay.code, replay.err).toBe(0);
      const state = JSON.parse(replay.out);
      expect(state.foldedSeq).toBe(atSeq);
      expect(state.limits).toEqual(served.limits);
      expect(state.leases).toEqual(served.leases);

      const passing = await leasectl(env, 'audit');
      expect(passing.code, passing.out + passing.err).toBe(0);
      expect(passing.out).toMatch(/^audit passed: \d+ events and 0 undecodable messages/);

      const status = await leasectl(env, '--json', 'status');
      expect(status.code, status.err).toBe(0);
      await eventually(async () => {
        const report = JSON.parse((await leasectl(env, '--json', 'status')).out);
        return report.replicas.some(
          (r: { service: string; lag: number }) => r.service === 'lease-gateway' && r.lag === 0,
        );
      });

      // A grant beyond capacity, written around the gateway.
      const now = Date.now();
      const ack = await jetstream(nc).publish(
        ADMISSION_SUBJECT,
        encodeEvent({
          type: 'LeasesGranted',
          v: 1,
          atMs: now,
          grants: [
            {
              leaseId: 'rogue',
              requester: 'rogue',
              slots: [{ limit: 'gpu', count: 1 }],
              ttlMs: 60_000,
              deadlineMs: now + 60_000,
              fencingToken: 1_000,
              secretHash: 'c'.repeat(64),
            },
          ],
        }),
      );
      const failing = await leasectl(env, 'audit');
      expect(failing.code).toBe(1);
      expect(failing.out).toContain(`seq ${ack.seq} OVERSUBSCRIBED (LeasesGranted, lease rogue, limit gpu)`);

      const revoke = await leasectl(env, 'revoke', a.leaseId, '--reason', 'again');
      expect(revoke.code).toBe(1);
      expect(revoke.err).toContain('LEASE_REVOKED');
      const usage = await leasectl(env, 'replay');
      expect(usage.code).toBe(2);
    } finally {
      await gateway?.stop();
      await nc.close();
      await nats.stop();
    }
    const down = await leasectl({ NATS_URL: nats.url }, 'status');
    expect(down.code).toBe(3);
    expect(down.err).toContain('UNAVAILABLE');
  });
});
