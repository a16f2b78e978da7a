import type { DecodeProblem } from './codec.js';
import type { StoredEvent } from './lease/events.js';
import { type AnomalyKind, type LeaseState, leasesMaxFor, liveLeasesOf } from './lease/state.js';

/**
 * The invariant audit over a log, as a pure observer of a fold (DESIGN.md "Invariants").
 * The fold is the judge: every event it refused is an anomaly with its sequence, and the
 * audit reports each one as it appears. On top of that it re-checks, independently of the
 * fold's own checks and only where the event touched the state (so the cost per event
 * stays constant), that the state the fold produced still holds invariants 1 and 2 and
 * that applied fencing tokens grow. Those re-checks can only fire if the fold itself is
 * wrong. Undecodable messages are findings too: an audit cannot vouch for what it cannot
 * read.
 */
export const AUDIT_RECHECK_KINDS = [
  /** A limit has more slots in use than it has, after the fold applied an event. */
  'STATE_OVERSUBSCRIBED',
  /** A limit's used slots went below zero. */
  'STATE_NEGATIVE_USED',
  /** A requester holds more live leases than its limit, after the fold applied an event. */
  'STATE_REQUESTER_OVER_LIMIT',
  /** An applied grant's fencing token is not above every earlier applied grant's. */
  'STATE_FENCING_NOT_GROWING',
  /** More anomalies appeared in one event than the fold keeps in its window: some are not listed. */
  'ANOMALIES_NOT_LISTED',
] as const;
export type AuditRecheckKind = (typeof AUDIT_RECHECK_KINDS)[number];

export type AuditFinding =
  | {
      readonly source: 'fold';
      readonly seq: number;
      readonly kind: AnomalyKind;
      readonly eventType: string;
      readonly message: string;
      readonly leaseId?: string;
      readonly limit?: string;
    }
  | {
      readonly source: 'recheck';
      readonly seq: number;
      readonly kind: AuditRecheckKind;
      readonly eventType: string;
      readonly message: string;
      readonly leaseId?: string;
      readonly limit?: string;
    }
  | {
      readonly source: 'decode';
      readonly seq: number;
      readonly kind: 'UNDECODABLE';
      readonly problem: DecodeProblem;
      readonly subject: string;
      readonly message: string;
    };

export interface AuditCounts {
  readonly events: number;
  readonly undecodable: number;
  readonly findings: number;
  readonly byKind: Readonly<Record<string, number>>;
}

export interface Auditor {
  /** Call after `evolve` folded `stored` into `state` (Projection's onEvent). */
  observe(stored: StoredEvent, state: LeaseState): AuditFinding[];
  /** Call for a message that could not be decoded (Projection's onProblem). */
  problem(seq: number, subject: string, problem: DecodeProblem, message: string): AuditFinding;
  counts(): AuditCounts;
}

/**
 * An auditor for a fold that starts from the initial state. It holds a few counters and
 * the highest applied fencing token: memory does not grow with the log.
 */
export const createAuditor = (): Auditor => {
  let anomaliesSeen = 0;
  let highestAppliedToken = 0;
  let events = 0;
  let undecodable = 0;
  let findings = 0;
  const byKind = new Map<string, number>();
  const count = (list: AuditFinding[]): AuditFinding[] => {
    for (const finding of list) byKind.set(finding.kind, (byKind.get(finding.kind) ?? 0) + 1);
    findings += list.length;
    return list;
  };

  return {
    observe(stored, state) {
      events += 1;
      const { seq, event } = stored;
      const found: AuditFinding[] = [];
      const fresh = state.anomalyCount - anomaliesSeen;
      anomaliesSeen = state.anomalyCount;
      if (fresh > 0) {
        const listed = Math.min(fresh, state.anomalies.length);
        for (const anomaly of state.anomalies.slice(state.anomalies.length - listed)) {
          found.push({
            source: 'fold',
            seq: anomaly.seq,
            kind: anomaly.kind,
            eventType: anomaly.eventType,
            message: anomaly.message,
            ...(anomaly.leaseId === undefined ? {} : { leaseId: anomaly.leaseId }),
            ...(anomaly.limit === undefined ? {} : { limit: anomaly.limit }),
          });
        }
        if (listed < fresh) {
          found.push({
            source: 'recheck',
            seq,
            kind: 'ANOMALIES_NOT_LISTED',
            eventType: event.type,
            message: `${fresh - listed} more anomalies at this sequence than the fold keeps`,
          });
        }
      }
      const recheck = (
        kind: AuditRecheckKind,
        message: string,
        extra: { leaseId?: string; limit?: string },
      ) => found.push({ source: 'recheck', seq, kind, eventType: event.type, message, ...extra });
      const checkLimit = (name: string) => {
        const limit = state.limits.get(name);
        if (!limit) return;
        if (limit.used > limit.slotsMax)
          recheck('STATE_OVERSUBSCRIBED', `${name} has ${limit.used} of ${limit.slotsMax} slots used`, {
            limit: name,
          });
        if (limit.used < 0)
          recheck('STATE_NEGATIVE_USED', `${name} has ${limit.used} slots used`, { limit: name });
      };
      const checkRequester = (requester: string) => {
        const live = liveLeasesOf(state, requester);
        const max = leasesMaxFor(state, requester);
        if (live > max)
          recheck('STATE_REQUESTER_OVER_LIMIT', `${requester} holds ${live} live leases of ${max}`, {});
      };
      switch (event.type) {
        case 'LeasesGranted':
          for (const grant of event.grants) {
            const lease = state.leases.get(grant.leaseId);
            // Applied by this event: the grant's record carries this sequence.
            if (lease?.grantSeq !== seq) continue;
            if (grant.fencingToken <= highestAppliedToken) {
              recheck(
                'STATE_FENCING_NOT_GROWING',
                `applied fencing token ${grant.fencingToken} is not above ${highestAppliedToken}`,
                { leaseId: grant.leaseId },
              );
            }
            highestAppliedToken = Math.max(highestAppliedToken, grant.fencingToken);
            for (const claim of grant.slots) checkLimit(claim.limit);
            checkRequester(grant.requester);
          }
          break;
        case 'LeaseReleased':
        case 'LeaseRevoked': {
          const lease = state.leases.get(event.leaseId);
          if (lease?.endSeq === seq) for (const claim of lease.slots) checkLimit(claim.limit);
          break;
        }
        case 'LimitResized':
          checkLimit(event.limit);
          break;
        case 'RequesterLimitSet':
          if (event.requester !== '*') checkRequester(event.requester);
          break;
        default:
          break;
      }
      return count(found);
    },

    problem(seq, subject, problem, message) {
      undecodable += 1;
      const finding: AuditFinding = { source: 'decode', seq, kind: 'UNDECODABLE', problem, subject, message };
      count([finding]);
      return finding;
    },

    counts: () => ({ events, undecodable, findings, byKind: Object.fromEntries(byKind) }),
  };
};

/** One line of the audit's report: "seq 8813 OVERSUBSCRIBED (LeasesGranted, lease x, limit gpu): ...". */
export const formatFinding = (finding: AuditFinding): string => {
  if (finding.source === 'decode') {
    return `seq ${finding.seq} UNDECODABLE ${finding.problem} on ${finding.subject}: ${finding.message}`;
  }
  const where = [
    finding.eventType,
    ...(finding.leaseId === undefined ? [] : [`lease ${finding.leaseId}`]),
    ...(finding.limit === undefined ? [] : [`limit ${finding.limit}`]),
  ].join(', ');
  return `seq ${finding.seq} ${finding.kind} (${where}): ${finding.message}`;
};
