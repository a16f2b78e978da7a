import type { LeaseEvent } from '@lease/events';
import { describe, expect, it } from 'vitest';
import {
  csvField,
  csvRow,
  exportCsvRow,
  historyLine,
  historyText,
  parseLogPoint,
  progressText,
  table,
} from '../src/format.js';

const T = Date.UTC(2026, 0, 1, 2, 13, 33, 120);

describe('--at, --from and --to', () => {
  it('reads digits as a stream sequence', () => {
    expect(parseLogPoint('8812')).toEqual({ seq: 8812 });
    expect(parseLogPoint(' 0 ')).toEqual({ seq: 0 });
  });

  it('reads an ISO 8601 time, as UTC when it names no zone', () => {
    expect(parseLogPoint('2026-01-01T02:14:03.120Z')).toEqual({ time: new Date('2026-01-01T02:14:03.120Z') });
    expect(parseLogPoint('2026-01-01T02:14:03.120')).toEqual({ time: new Date('2026-01-01T02:14:03.120Z') });
    expect(parseLogPoint('2026-01-01T03:14:03+01:00')).toEqual({ time: new Date('2026-01-01T02:14:03Z') });
    expect(parseLogPoint('2026-01-01')).toEqual({ time: new Date('2026-01-01T00:00:00Z') });
  });

  it('refuses anything else, with a message that says what was expected', () => {
    for (const bad of ['', 'yesterday', '-5', '12.5', '2026-13-45T00:00:00Z', '9'.repeat(20)]) {
      expect(() => parseLogPoint(bad), bad).toThrow(/sequence|time|large/);
    }
  });
});

describe('CSV', () => {
  it('quotes only fields that need it, doubling quotes (RFC 4180)', () => {
    expect(csvField('plain')).toBe('plain');
    expect(csvField('a,b')).toBe('"a,b"');
    expect(csvField('say "hi"')).toBe('"say ""hi"""');
    expect(csvField('two\nlines')).toBe('"two\nlines"');
    expect(csvField(' edge')).toBe('" edge"');
    expect(csvField(undefined)).toBe('');
    expect(csvField(42)).toBe('42');
    expect(csvRow(['x', { a: 1, b: 'c' }])).toBe('x,"{""a"":1,""b"":""c""}"');
  });

  it('writes one row per event with the event as JSON', () => {
    const event: LeaseEvent = { type: 'LeaseReleased', v: 1, atMs: T, leaseId: 'l1', detail: 'done, ok' };
    expect(exportCsvRow(5, new Date(T), 'lease.events.lease.l1', event)).toBe(
      `5,2026-01-01T02:13:33.120Z,lease.events.lease.l1,LeaseReleased,${T},,l1,"{""type"":""LeaseReleased"",""v"":1,""atMs"":${T},""leaseId"":""l1"",""detail"":""done, ok""}"`,
    );
  });
});

describe('history lines', () => {
  const deadline = Date.UTC(2026, 0, 1, 2, 14, 3, 120);

  it('says why a lease was revoked, its deadline, and the last sequence the revoker saw', () => {
    const revoked: LeaseEvent = {
      type: 'LeaseRevoked',
      v: 1,
      atMs: deadline + 1_000,
      leaseId: 'l1',
      reason: 'expired',
      deadlineMs: deadline,
      decidedAgainstSeq: 8812,
    };
    expect(historyText(revoked, { leaseId: 'l1' })).toBe(
      'revoked: expired, deadline 02:14:03.120, no renewal after seq 8812',
    );
    expect(historyLine(8813, revoked, { leaseId: 'l1' })).toBe(
      '2026-01-01T02:14:04.120Z  seq 8813  repossessor  revoked: expired, deadline 02:14:03.120, no renewal after seq 8812',
    );
  });

  it('names the grant when the revoker saw nothing after it', () => {
    const revoked: LeaseEvent = {
      type: 'LeaseRevoked',
      v: 1,
      atMs: deadline,
      actor: 'ops@example.com',
      leaseId: 'l1',
      reason: 'admin',
      deadlineMs: deadline,
      decidedAgainstSeq: 0,
      detail: 'stuck job',
    };
    expect(historyLine(20, revoked, { leaseId: 'l1', grantSeq: 7 })).toBe(
      '2026-01-01T02:14:03.120Z  seq 20  ops@example.com  revoked: admin, deadline 02:14:03.120, decided against seq 7, stuck job',
    );
  });

  it('describes a grant and a renewal', () => {
    const granted: LeaseEvent = {
      type: 'LeasesGranted',
      v: 1,
      atMs: T,
      grants: [
        {
          leaseId: 'other',
          requester: 'x',
          slots: [{ limit: 'cpu', count: 1 }],
          ttlMs: 1,
          deadlineMs: T,
          fencingToken: 1,
          secretHash: 'c'.repeat(64),
        },
        {
          leaseId: 'l1',
          requester: 'team-ml',
          holder: 'host-1',
          slots: [{ limit: 'gpu', count: 2 }],
          ttlMs: 30_000,
          deadlineMs: T + 30_000,
          fencingToken: 7,
          secretHash: 'c'.repeat(64),
        },
      ],
    };
    expect(historyText(granted, { leaseId: 'l1' })).toBe(
      'granted: requester team-ml, holder host-1, slots gpux2, ttl 30000 ms, deadline 02:14:03.120, fencing token 7',
    );
    expect(
      historyText(
        { type: 'LeaseRenewed', v: 1, atMs: T, leaseId: 'l1', ttlMs: 10_000, deadlineMs: T + 10_000 },
        { leaseId: 'l1' },
      ),
    ).toBe('renewed: ttl 10000 ms, deadline 02:13:43.120');
  });
});

describe('tables and progress', () => {
  it('pads columns to their widest cell', () => {
    expect(
      table(
        ['A', 'LONGER'],
        [
          ['xxxx', 1],
          [undefined, 22],
        ],
      ),
    ).toBe('A     LONGER\nxxxx  1\n-     22');
  });

  it('draws a bounded bar', () => {
    expect(progressText(500, 1000, 1234.4, 10)).toBe('[#####-----]  50%  500/1,000 events  1,234/s');
    expect(progressText(5000, 1000, 0, 4)).toBe('[####] 100%  5,000/1,000 events  0/s');
  });
});
