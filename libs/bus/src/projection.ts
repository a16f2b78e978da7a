import {
  type DecodeProblem,
  decodeEvent,
  evolve,
  initialState,
  LeaseError,
  type LeaseEvent,
  type LeaseState,
  STREAM_NAME,
  type StoredEvent,
  skipUndecodable,
} from '@lease/events';
import { DeliverPolicy, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';

export interface ProjectionOptions {
  readonly js: JetStreamClient;
  readonly jsm: JetStreamManager;
  /** A restored snapshot to continue from; the tail after its `lastSeq` is replayed. */
  readonly from?: LeaseState;
  /** Called after each event is folded (the audit, the repossessor's deadline index). */
  readonly onEvent?: (stored: StoredEvent, state: LeaseState) => void;
  /** An undecodable message: logged and counted by the caller, skipped by the fold. */
  readonly onProblem?: (seq: number, subject: string, problem: DecodeProblem, message: string) => void;
  /** Messages asked of the server at a time while replaying. */
  readonly batchMessages?: number;
  /** How long `catchUp()` waits by default (CATCH_UP_TIMEOUT_MS). */
  readonly catchUpTimeoutMs?: number;
  /** Folds nothing after this sequence (a point-in-time replay); `start()` resolves once it is reached. */
  readonly untilSeq?: number;
}

export const CATCH_UP_TIMEOUT_MS = 10_000;

/**
 * The lease state as a live fold of the log: replayed from a snapshot plus the tail on
 * start, then kept current from an ordered consumer. It is ready once it has folded
 * everything the stream held when it started; until then `notReady()` gives the
 * retryable error every answer must carry (never "unknown lease" from a half-built view).
 */
export class Projection {
  readonly state: LeaseState;
  private readyAtSeq = Number.POSITIVE_INFINITY;
  private readonly waiters = new Set<{ seq: number; resolve: (ok: boolean) => void }>();
  private stopping = false;
  private running: Promise<void> | undefined;
  private stopConsumer: (() => void) | undefined;
  private readonly ownEvents = new Map<number, LeaseEvent>();
  problems = 0;

  constructor(private readonly options: ProjectionOptions) {
    this.state = options.from ?? initialState();
  }

  get ready(): boolean {
    return this.state.lastSeq >= this.readyAtSeq;
  }

  notReady(): LeaseError | undefined {
    if (this.ready) return undefined;
    return new LeaseError('NOT_READY', `still replaying the lease log (at seq ${this.state.lastSeq})`, {
      details: { seq: this.state.lastSeq },
    });
  }

  /** Starts following the log; resolves once caught up with what the stream held at start. */
  async start(timeoutMs = CATCH_UP_TIMEOUT_MS * 6): Promise<void> {
    const lastSeq = Math.min(await this.streamLastSeq(), this.options.untilSeq ?? Number.POSITIVE_INFINITY);
    this.readyAtSeq = lastSeq;
    this.running = this.follow();
    if (!(await this.waitFor(lastSeq, timeoutMs))) {
      throw new LeaseError('NOT_READY', `replay did not reach seq ${lastSeq} within ${timeoutMs} ms`);
    }
  }

  /** Waits until everything appended so far is folded: after a rejected append, before deciding again. */
  async catchUp(timeoutMs = this.options.catchUpTimeoutMs ?? CATCH_UP_TIMEOUT_MS): Promise<boolean> {
    return this.waitFor(await this.streamLastSeq(), timeoutMs);
  }

  waitFor(seq: number, timeoutMs: number): Promise<boolean> {
    if (this.state.lastSeq >= seq) return Promise.resolve(true);
    return new Promise((resolve) => {
      const waiter = {
        seq,
        resolve: (ok: boolean) => {
          clearTimeout(timer);
          this.waiters.delete(waiter);
          resolve(ok);
        },
      };
      const timer = setTimeout(() => waiter.resolve(false), timeoutMs);
      this.waiters.add(waiter);
    });
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.stopConsumer?.();
    for (const waiter of [...this.waiters]) waiter.resolve(false);
    await this.running?.catch(() => undefined);
  }

  private async streamLastSeq(): Promise<number> {
    const info = await this.options.jsm.streams.info(STREAM_NAME);
    return info.state.last_seq;
  }

  /** Folds messages in order for as long as the projection runs; the ordered consumer resumes after outages. */
  private async follow(): Promise<void> {
    while (!this.stopping) {
      try {
        const consumer = await this.options.js.consumers.get(STREAM_NAME, {
          deliver_policy: DeliverPolicy.StartSequence,
          opt_start_seq: this.state.lastSeq + 1,
        });
        const messages = await consumer.consume({ max_messages: this.options.batchMessages ?? 4_096 });
        this.stopConsumer = () => void messages.stop();
        if (this.stopping) messages.stop();
        const untilSeq = this.options.untilSeq ?? Number.POSITIVE_INFINITY;
        for await (const message of messages) {
          if (message.seq <= untilSeq) this.apply(message.seq, message.subject, message.data);
          if (message.seq >= untilSeq) {
            this.stopping = true;
            messages.stop();
          }
        }
      } catch {
        // The consumer could not be created or broke (server restarting): try again shortly.
        if (!this.stopping) await new Promise((resolve) => setTimeout(resolve, 250));
      }
    }
  }

  /**
   * The event this process appended at `seq`, acknowledged but not folded yet: the fold
   * takes it as it is instead of decoding the bytes again (they were serialized from it).
   * A sequence already folded is ignored.
   */
  appended(seq: number, event: LeaseEvent): void {
    if (seq > this.state.lastSeq) this.ownEvents.set(seq, event);
  }

  private apply(seq: number, subject: string, data: Uint8Array): void {
    if (seq <= this.state.lastSeq) return;
    const own = this.ownEvents.get(seq);
    if (own) this.ownEvents.delete(seq);
    const decoded = own ? { ok: true as const, event: own } : decodeEvent(data);
    if (decoded.ok) {
      const stored = { seq, event: decoded.event };
      evolve(this.state, stored);
      this.options.onEvent?.(stored, this.state);
    } else {
      skipUndecodable(this.state, seq, subject);
      this.problems += 1;
      this.options.onProblem?.(seq, subject, decoded.problem, decoded.message);
    }
    for (const waiter of this.waiters) if (this.state.lastSeq >= waiter.seq) waiter.resolve(true);
  }
}
