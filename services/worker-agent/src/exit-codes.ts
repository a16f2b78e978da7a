import { constants } from 'node:os';
import type { OutcomeV1 } from './protocol.js';

/**
 * Exit codes of the one-shot mode (`lease-agent run`), from sysexits.h where one fits, so
 * that a script can tell "the workload failed" from "it never ran" from "it was stopped".
 * Any other code is the workload's own.
 */
export const EXIT = {
  /** Bad command line, or a request the gateway refuses for good (unknown limit, TTL out of range). */
  USAGE: 64,
  /** NATS or the gateway could not be reached. */
  UNAVAILABLE: 69,
  /** The agent itself failed. */
  SOFTWARE: 70,
  /** No slot came: NO_CAPACITY without --wait, or --wait passed (WAIT_TIMEOUT). */
  NO_SLOT: 73,
  /** The lease was lost while the workload ran; the workload was terminated. */
  LEASE_LOST: 75,
  /** The command could not be started (as a shell answers for a missing command). */
  CANNOT_START: 127,
} as const;

const NO_SLOT_CODES = new Set(['NO_CAPACITY', 'WAIT_TIMEOUT', 'REQUESTER_LIMIT_REACHED', 'WAIT_CANCELLED']);
const UNAVAILABLE_CODES = new Set(['UNAVAILABLE', 'NOT_READY', 'STALE_VIEW']);

/** When the workload never started: the code for why. */
export const exitCodeForStartError = (code: string): number => {
  if (NO_SLOT_CODES.has(code)) return EXIT.NO_SLOT;
  if (UNAVAILABLE_CODES.has(code)) return EXIT.UNAVAILABLE;
  if (code === 'SPAWN_FAILED') return EXIT.CANNOT_START;
  return EXIT.USAGE;
};

const signalNumber = (signal: string | null): number =>
  (signal ? constants.signals[signal as keyof typeof constants.signals] : undefined) ?? 0;

/** When it ran: the workload's own code, 128 + signal as a shell reports it, or LEASE_LOST. */
export const exitCodeForOutcome = (outcome: Pick<OutcomeV1, 'outcome' | 'exitCode' | 'signal'>): number => {
  switch (outcome.outcome) {
    case 'exited':
      return outcome.exitCode ?? EXIT.SOFTWARE;
    case 'signalled':
      return 128 + signalNumber(outcome.signal);
    case 'lease-lost':
      return EXIT.LEASE_LOST;
    case 'agent-stopped':
    case 'abandoned':
      return outcome.signal ? 128 + signalNumber(outcome.signal) : EXIT.SOFTWARE;
  }
};
