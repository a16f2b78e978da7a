import type { Grant, LeaseEvent, LeaseView, LimitView } from '@lease/events';

/** Pure pieces of the CLI: argument parsing, tables, CSV, history lines. No I/O. */

/** A point in the log: a stream sequence, or a time (the last event stored at or before it). */
export type LogPoint = { readonly seq: number } | { readonly time: Date };

const ISO_DATE = /^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})?)?$/;

/**
 * `--at`, `--from`, `--to`: a sequence (digits) or an ISO 8601 time. A time without a
 * zone is taken as UTC, so that the same argument means the same point on every machine.
 */
export const parseLogPoint = (text: string): LogPoint => {
  const trimmed = text.trim();
  if (/^\d+$/.test(trimmed)) {
    const seq = Number(trimmed);
    if (!Number.isSafeInteger(seq)) throw new RangeError(`sequence ${trimmed} is too large`);
    return { seq };
  }
  const match = ISO_DATE.exec(trimmed);
  if (!match) throw new RangeError(`"${text}" is neither a sequence number nor an ISO 8601 time`);
  const withZone = match[1] === undefined || match[4] !== undefined ? trimmed : `${trimmed}Z`;
  const ms = Date.parse(withZone.replace(' ', 'T'));
  if (Number.isNaN(ms)) throw new RangeError(`"${text}" is not a valid time`);
  return { time: new Date(ms) };
};

export const describePoint = (point: LogPoint): string =>
  'seq' in point ? `seq ${point.seq}` : point.time.toISOString();

/** HH:MM:SS.mmm in UTC, as deadlines are shown in history lines. */
export const timeOfDay = (ms: number): string => new Date(ms).toISOString().slice(11, 23);

export const isoTime = (ms: number): string => new Date(ms).toISOString();

const CSV_NEEDS_QUOTES = /[",\r\n]|^\s|\s$/;

/** One CSV field (RFC 4180): quoted when it holds a comma, quote, line break or edge space. */
export const csvField = (value: unknown): string => {
  if (value === undefined || value === null) return '';
  const text =
    typeof value === 'string' ? value : typeof value === 'object' ? JSON.stringify(value) : String(value);
  return CSV_NEEDS_QUOTES.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
};

export const csvRow = (values: readonly unknown[]): string => values.map(csvField).join(',');

export const EXPORT_CSV_HEADER = [
  'seq',
  'time',
  'subject',
  'type',
  'atMs',
  'actor',
  'leaseId',
  'event',
] as const;

export const exportCsvRow = (seq: number, time: Date, subject: string, event: LeaseEvent): string =>
  csvRow([
    seq,
    time.toISOString(),
    subject,
    event.type,
    event.atMs,
    event.actor,
    'leaseId' in event ? event.leaseId : undefined,
    event,
  ]);

export const slotsText = (slots: readonly { limit: string; count: number }[]): string =>
  slots.map((claim) => `${claim.limit}x${claim.count}`).join('+');

/** Who an event came from: the actor the request named, or the service that writes it. */
export const actorOf = (event: LeaseEvent): string =>
  event.actor ?? (event.type === 'LeaseRevoked' && event.reason === 'expired' ? 'repossessor' : '-');

/** What one event did to one lease, in words: "revoked: expired, deadline 02:14:03.120, no renewal after seq 8812". */
export const historyText = (event: LeaseEvent, context: { leaseId: string; grantSeq?: number }): string => {
  switch (event.type) {
    case 'LeasesGranted': {
      const grant = event.grants.find((g) => g.leaseId === context.leaseId);
      return grant ? grantText(grant) : `granted (another lease's grant)`;
    }
    case 'LeaseRenewed':
      return `renewed: ttl ${event.ttlMs} ms, deadline ${timeOfDay(event.deadlineMs)}`;
    case 'LeaseReleased':
      return `released${event.detail === undefined ? '' : `: ${event.detail}`}`;
    case 'LeaseRevoked': {
      const against =
        event.decidedAgainstSeq > 0
          ? `seq ${event.decidedAgainstSeq}`
          : context.grantSeq === undefined
            ? 'the grant'
            : `seq ${context.grantSeq}`;
      const parts = [
        event.reason,
        `deadline ${timeOfDay(event.deadlineMs)}`,
        event.reason === 'expired' ? `no renewal after ${against}` : `decided against ${against}`,
        ...(event.detail === undefined ? [] : [event.detail]),
      ];
      return `revoked: ${parts.join(', ')}`;
    }
    case 'AcquiresQueued':
      return 'queued for slots';
    case 'WaitEnded':
      return `wait ended: ${event.reason}`;
    default:
      return event.type;
  }
};

const grantText = (grant: Grant): string =>
  [
    `granted: requester ${grant.requester}`,
    ...(grant.holder === undefined ? [] : [`holder ${grant.holder}`]),
    `slots ${slotsText(grant.slots)}`,
    `ttl ${grant.ttlMs} ms`,
    `deadline ${timeOfDay(grant.deadlineMs)}`,
    `fencing token ${grant.fencingToken}`,
  ].join(', ');

/** "2026-01-01T02:13:33.120Z  seq 8801  ops@x  granted: ..." */
export const historyLine = (
  seq: number,
  event: LeaseEvent,
  context: { leaseId: string; grantSeq?: number },
): string => `${isoTime(event.atMs)}  seq ${seq}  ${actorOf(event)}  ${historyText(event, context)}`;

/** One line of `tail`: time, sequence, type, and the fields that say what happened. */
export const tailLine = (seq: number, time: Date, event: LeaseEvent): string => {
  const detail = (() => {
    switch (event.type) {
      case 'LimitDefined':
      case 'LimitResized':
        return `${event.limit} slotsMax ${event.slotsMax}`;
      case 'LimitRemoved':
        return event.limit;
      case 'RequesterLimitSet':
        return `${event.requester} leasesMax ${event.leasesMax}`;
      case 'LeasesGranted':
        return event.grants.map((g) => `${g.leaseId} ${g.requester} ${slotsText(g.slots)}`).join('; ');
      case 'AcquiresQueued':
        return event.waiters.map((w) => `${w.leaseId} ${w.requester} ${slotsText(w.slots)}`).join('; ');
      default:
        return `${event.leaseId} ${historyText(event, { leaseId: event.leaseId })}`;
    }
  })();
  return `${time.toISOString()}  seq ${seq}  ${event.type}  ${detail}`;
};

/** A plain text table: columns padded to their widest cell. */
export const table = (header: readonly string[], rows: readonly (readonly unknown[])[]): string => {
  const cells = [header, ...rows.map((row) => row.map((cell) => (cell === undefined ? '-' : String(cell))))];
  const widths = header.map((_, i) => Math.max(...cells.map((row) => (row[i] ?? '').length)));
  return cells
    .map((row) =>
      row
        .map((cell, i) => (cell ?? '').padEnd(widths[i] ?? 0))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
};

export const limitsTable = (
  limits: readonly LimitView[],
  liveByLimit?: ReadonlyMap<string, string>,
): string =>
  table(
    ['LIMIT', 'SLOTS', 'USED', 'FREE', ...(liveByLimit ? ['LIVE LEASES'] : [])],
    limits.map((l) => [
      l.limit,
      l.slotsMax,
      l.used,
      l.free,
      ...(liveByLimit ? [liveByLimit.get(l.limit)] : []),
    ]),
  );

export const leasesTable = (leases: readonly LeaseView[]): string =>
  table(
    ['LEASE', 'STATUS', 'REQUESTER', 'HOLDER', 'SLOTS', 'DEADLINE', 'FENCING', 'RENEWALS', 'GRANT SEQ'],
    leases.map((l) => [
      l.leaseId,
      l.status === 'revoked' && l.revokeReason ? `revoked(${l.revokeReason})` : l.status,
      l.requester,
      l.holder,
      slotsText(l.slots),
      isoTime(l.deadlineMs),
      l.fencingToken,
      l.renewals,
      l.grantSeq,
    ]),
  );

/** The progress bar's text: "[########------------]  40%  400,000/1,000,000 events  98,000/s". */
export const progressText = (done: number, total: number, perSecond: number, width = 24): string => {
  const ratio = total > 0 ? Math.min(1, done / total) : 1;
  const filled = Math.round(ratio * width);
  const pct = `${Math.floor(ratio * 100)}%`.padStart(4);
  return `[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${pct}  ${done.toLocaleString('en-US')}/${total.toLocaleString('en-US')} events  ${Math.round(perSecond).toLocaleString('en-US')}/s`;
};
