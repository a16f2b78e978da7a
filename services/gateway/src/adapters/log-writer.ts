import { type AppendResult, appendEvent, type Projection, type Publisher } from '@lease/bus';
import type { LeaseEvent } from '@lease/events';
import type { GatewayMetrics } from '../metrics.js';

/** Same bytes, same Nats-Msg-Id: a retry after an uncertain failure is stored at most once. */
export const UNCERTAIN_RETRIES = 3;
const UNCERTAIN_BACKOFF_MS = [100, 300, 900] as const;
export const APPEND_TIMEOUT_MS = 3_000;
/** How long a reply waits for the projection to fold its own append (read-your-writes on this replica). */
export const FOLD_WAIT_MS = 5_000;

export class LogWriter {
  private counter = 0;

  constructor(
    private readonly js: Publisher,
    readonly projection: Projection,
    private readonly instance: string,
    private readonly metrics: GatewayMetrics,
    /** The append itself; tests wrap it to lose acknowledgements of appends that were stored. */
    private readonly appendOnce: typeof appendEvent = appendEvent,
  ) {}

  nextMsgId(): string {
    this.counter += 1;
    return `${this.instance}-${Date.now().toString(36)}-${this.counter}`;
  }

  /**
   * Appends one decided event conditionally. After an uncertain failure it resends the
   * same message under the same Nats-Msg-Id, so that JetStream stores it at most once.
   * On success it waits until the projection has folded it.
   *
   * Renewals carry no message id: the expectation on their lease's subject already stores
   * a resent renewal at most once (a resend after a stored first try is a conflict, and the
   * caller catches up and decides again: the renewal it then appends extends the lease
   * once more), and at renewal rates JetStream's duplicate window would hold millions of
   * ids (ADR 0010).
   */
  async append(event: LeaseEvent, expectedLastSubjectSeq: number): Promise<AppendResult> {
    const msgId = event.type === 'LeaseRenewed' ? undefined : this.nextMsgId();
    let result: AppendResult = await this.appendOnce(this.js, event, {
      expectedLastSubjectSeq,
      msgId,
      timeoutMs: APPEND_TIMEOUT_MS,
    });
    for (let retry = 0; !result.ok && !result.conflict && retry < UNCERTAIN_RETRIES; retry++) {
      this.metrics.uncertainRetries += 1;
      await sleep(UNCERTAIN_BACKOFF_MS[retry]!);
      result = await this.appendOnce(this.js, event, {
        expectedLastSubjectSeq,
        msgId,
        timeoutMs: APPEND_TIMEOUT_MS,
      });
    }
    if (result.ok) {
      this.projection.appended(result.seq, event);
      await this.projection.waitFor(result.seq, FOLD_WAIT_MS);
    } else if (result.conflict) this.metrics.conflicts += 1;
    return result;
  }
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
