import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '../..');

/** The README's run command, as a newcomer meets it: its own nats-server, the services as processes. */
describe('npm run demo', () => {
  it('walks a lease through its life and ends with a clean replay', async () => {
    const env = { ...process.env };
    delete env.NATS_URL;
    const child = spawn(process.execPath, [join(root, 'scripts/demo.mjs')], {
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    const code = await new Promise((resolve) => child.once('exit', resolve));
    clearTimeout(timer);
    expect(code, output).toBe(0);
    expect(output).toContain('started a local nats-server');
    expect(output).toMatch(/carol: NO_CAPACITY \(retryable: true\)/);
    expect(output).toMatch(/bob's late renewal: LEASE_REVOKED \(retryable: false\)/);
    expect(output).toContain('LeaseRevoked');
    expect(output).toContain('anomalies found by the fold: 0');
    expect(output).toContain('demo finished');
  }, 90_000);
});
