import { type ChildProcess, spawn } from 'node:child_process';
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connectBus, findFreePorts, findNatsServerBinary } from '@lease/bus';
import { createLeaseClient } from '@lease/client';
import { ADMISSION_SUBJECT, encodeEvent, leaseSubject, STREAM_NAME } from '@lease/events';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startGateway } from '../harness/services.js';

const root = join(import.meta.dirname, '../..');
const PASSWORDS = {
  LEASE_GATEWAY_PASSWORD: 'gw-secret',
  LEASE_REPOSSESSOR_PASSWORD: 'rp-secret',
  LEASE_CLIENT_PASSWORD: 'client-secret',
  LEASE_OPERATOR_PASSWORD: 'op-secret',
  LEASE_SYSTEM_PASSWORD: 'sys-secret',
};

/**
 * The deploy configuration's accounts (deploy/nats/accounts.conf) on a real server: only
 * the services may write the lease log, and the configs themselves are valid.
 */
describe('the deploy configuration', () => {
  let server: ChildProcess | undefined;
  let dir: string;
  let url: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'lease-deploy-'));
    copyFileSync(join(root, 'deploy/nats/accounts.conf'), join(dir, 'accounts.conf'));
    const [port] = await findFreePorts(1);
    url = `nats://127.0.0.1:${port}`;
    writeFileSync(
      join(dir, 'server.conf'),
      `listen: 127.0.0.1:${port}\njetstream { store_dir: "${join(dir, 'store')}" }\ninclude ./accounts.conf\n`,
    );
    server = spawn(findNatsServerBinary(), ['-c', join(dir, 'server.conf')], {
      env: { ...process.env, ...PASSWORDS },
      stdio: 'ignore',
    });
    await eventually(
      async () => {
        const nc = await connectBus({
          servers: url,
          name: 'probe',
          user: 'operator',
          pass: PASSWORDS.LEASE_OPERATOR_PASSWORD,
        });
        await nc.close();
        return true;
      },
      10_000,
      100,
    );
  });
  afterAll(() => {
    server?.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });

  it('holds valid nats-server configurations for the three cluster nodes', async () => {
    for (const node of ['nats-1', 'nats-2', 'nats-3']) {
      const check = spawn(findNatsServerBinary(), ['-t', '-c', join(root, `deploy/nats/${node}.conf`)], {
        env: { ...process.env, ...PASSWORDS },
        stdio: 'ignore',
      });
      const code = await new Promise((resolve) => check.once('exit', resolve));
      expect(code, node).toBe(0);
    }
  });

  it('lets the gateway write the log, and a client only talk to the gateway', async () => {
    const gateway = await startGateway(url, {
      NATS_USER: 'gateway',
      NATS_PASSWORD: PASSWORDS.LEASE_GATEWAY_PASSWORD,
    });
    const clientNc = await connectBus({
      servers: url,
      name: 'client',
      user: 'client',
      pass: PASSWORDS.LEASE_CLIENT_PASSWORD,
    });
    const repoNc = await connectBus({
      servers: url,
      name: 'repossessor',
      user: 'repossessor',
      pass: PASSWORDS.LEASE_REPOSSESSOR_PASSWORD,
    });
    try {
      const client = createLeaseClient({ nc: clientNc });
      await client.defineLimit({ limit: 'gpu', slotsMax: 1 });
      const lease = await client.acquire({
        requester: 'r',
        slots: [{ limit: 'gpu', count: 1 }],
        ttlMs: 60_000,
      });
      const jsm = await jetstreamManager(repoNc);
      const lastSeq = async () => (await jsm.streams.info(STREAM_NAME)).state.last_seq;
      const before = await lastSeq();

      const forged = encodeEvent({
        type: 'LimitDefined',
        v: 1,
        atMs: Date.now(),
        limit: 'forged',
        slotsMax: 99,
      });
      await expect(
        jetstream(clientNc).publish(ADMISSION_SUBJECT, forged, { timeout: 1_000 }),
      ).rejects.toThrow();
      await expect(
        jetstream(repoNc).publish(ADMISSION_SUBJECT, forged, { timeout: 1_000 }),
      ).rejects.toThrow();
      const release = encodeEvent({ type: 'LeaseReleased', v: 1, atMs: Date.now(), leaseId: lease.leaseId });
      await expect(
        jetstream(clientNc).publish(leaseSubject(lease.leaseId), release, { timeout: 1_000 }),
      ).rejects.toThrow();
      expect(await lastSeq()).toBe(before);

      // The repossessor may append to a lease's own subject (its revocations go there).
      const revoke = encodeEvent({
        type: 'LeaseRevoked',
        v: 1,
        atMs: Date.now(),
        leaseId: lease.leaseId,
        reason: 'expired',
        deadlineMs: lease.deadlineMs,
        decidedAgainstSeq: 0,
      });
      const ack = await jetstream(repoNc).publish(leaseSubject(lease.leaseId), revoke, {
        expect: { lastSubjectSequence: 0 },
      });
      expect(ack.seq).toBe(before + 1);
      await eventually(() => gateway.projection.state.leases.get(lease.leaseId)?.status === 'revoked');
    } finally {
      await clientNc.close();
      await repoNc.close();
      await gateway.stop();
    }
  });
});
