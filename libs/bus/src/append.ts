import { encodeEvent, LeaseError, type LeaseEvent, subjectFor } from '@lease/events';
import { JetStreamApiError } from '@nats-io/jetstream';
import type { Publisher } from './publisher.js';

/** JetStream's error code for a failed Nats-Expected-Last-(Subject-)Sequence check. */
export const WRONG_LAST_SEQUENCE = 10071;

export type AppendResult =
  | { ok: true; seq: number; duplicate: boolean }
  /** Someone appended on the subject first: catch up and decide again. */
  | { ok: false; conflict: true }
  /**
   * No answer: the event may or may not be stored. The caller catches up and looks
   * before deciding again; it never assumes either way.
   */
  | { ok: false; conflict: false; error: LeaseError };

export interface AppendOptions {
  /** The last sequence on the event's subject that the decision was made against. */
  readonly expectedLastSubjectSeq: number;
  /** Nats-Msg-Id: a retry of the same append within the duplicate window is stored once. */
  readonly msgId?: string;
  readonly timeoutMs?: number;
}

/** One decision, one message, one conditional append (DESIGN.md "Conditional appends"). */
export const appendEvent = async (
  js: Publisher,
  event: LeaseEvent,
  options: AppendOptions,
): Promise<AppendResult> => {
  try {
    const ack = await js.publish(subjectFor(event), encodeEvent(event), {
      expect: { lastSubjectSequence: options.expectedLastSubjectSeq },
      ...(options.msgId ? { msgID: options.msgId } : {}),
      timeout: options.timeoutMs ?? 5_000,
    });
    return { ok: true, seq: ack.seq, duplicate: ack.duplicate };
  } catch (cause) {
    if (cause instanceof JetStreamApiError && cause.code === WRONG_LAST_SEQUENCE)
      return { ok: false, conflict: true };
    return {
      ok: false,
      conflict: false,
      error: new LeaseError('UNAVAILABLE', `append to JetStream failed: ${(cause as Error).message}`, {
        cause,
      }),
    };
  }
};
