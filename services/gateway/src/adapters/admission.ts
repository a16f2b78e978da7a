import type { Projection } from '@lease/bus';
import {
  type AcquireLease,
  type AcquireOutcome,
  type DefineLimit,
  decide,
  decideAcquisitions,
  type Grant,
  grantOf,
  LeaseError,
  type LeaseEvent,
  type Policy,
  type RemoveLimit,
  type SetRequesterLimit,
} from '@lease/events';
import type { Logger } from 'pino';
import type { GatewayMetrics } from '../metrics.js';
import type { LogWriter } from './log-writer.js';

/** Decide-append rounds before a pass gives up with a retryable STALE_VIEW (heavy contention). */
export const ADMISSION_ATTEMPTS = 20;

type LimitCommand = DefineLimit | RemoveLimit | SetRequesterLimit;
export type LimitOutcome = { ok: true } | { ok: false; error: LeaseError };

type Pending =
  | { kind: 'acquire'; command: (nowMs: number) => AcquireLease; resolve: (outcome: AcquireOutcome) => void }
  | { kind: 'limit'; command: (nowMs: number) => LimitCommand; resolve: (outcome: LimitOutcome) => void };

/**
 * The admission subject's single writer inside this process. Acquires that queue up while
 * an append is in flight are decided together and carried by one append (group commit);
 * across replicas, the conditional append on the admission subject serializes (ADR 0002).
 */
export class Admission {
  private readonly queue: Pending[] = [];
  private draining = false;

  constructor(
    private readonly projection: Projection,
    private readonly writer: LogWriter,
    private readonly policy: Policy,
    private readonly batchMax: number,
    private readonly nowMs: () => number,
    private readonly metrics: GatewayMetrics,
    private readonly logger: Logger,
  ) {}

  acquire(command: (nowMs: number) => AcquireLease): Promise<AcquireOutcome> {
    return new Promise((resolve) => this.enqueue({ kind: 'acquire', command, resolve }));
  }

  changeLimits(command: (nowMs: number) => LimitCommand): Promise<LimitOutcome> {
    return new Promise((resolve) => this.enqueue({ kind: 'limit', command, resolve }));
  }

  private enqueue(pending: Pending): void {
    this.queue.push(pending);
    if (!this.draining) void this.drain();
  }

  private async drain(): Promise<void> {
    this.draining = true;
    try {
      while (this.queue.length > 0) {
        const head = this.queue[0]!;
        if (head.kind === 'limit') {
          this.queue.shift();
          await this.runLimit(head);
        } else {
          let count = 0;
          while (count < this.queue.length && count < this.batchMax && this.queue[count]!.kind === 'acquire')
            count++;
          const batch = this.queue.splice(0, count) as Extract<Pending, { kind: 'acquire' }>[];
          await this.runAcquires(batch);
        }
      }
    } catch (error) {
      this.logger.error({ err: error }, 'admission loop failed');
    } finally {
      this.draining = false;
    }
  }

  private async runLimit(pending: Extract<Pending, { kind: 'limit' }>): Promise<void> {
    let confirmed = false;
    for (let attempt = 0; attempt < ADMISSION_ATTEMPTS; attempt++) {
      const decision = decide(this.projection.state, pending.command(this.nowMs()), this.policy);
      if (!decision.ok && !confirmed) {
        // A refusal may come from a view that lags another replica: confirm it on a caught-up one.
        if (!(await this.projection.catchUp())) return pending.resolve({ ok: false, error: lagging() });
        confirmed = true;
        continue;
      }
      if (!decision.ok) return pending.resolve(decision);
      const event = decision.events[0];
      if (!event) return pending.resolve({ ok: true });
      const result = await this.writer.append(event, this.projection.state.admissionSeq);
      if (result.ok) return pending.resolve({ ok: true });
      if (!result.conflict) return pending.resolve({ ok: false, error: result.error });
      await this.projection.catchUp();
    }
    pending.resolve({ ok: false, error: contended() });
  }

  private async runAcquires(batch: Extract<Pending, { kind: 'acquire' }>[]): Promise<void> {
    const commands = batch.map((pending) => pending.command(this.nowMs()));
    const settled: (AcquireOutcome | undefined)[] = batch.map(() => undefined);
    let confirmed = false;
    for (let attempt = 0; attempt < ADMISSION_ATTEMPTS; attempt++) {
      const open = commands.map((_, index) => index).filter((index) => settled[index] === undefined);
      // A grant of ours may already be in the log (an append whose acknowledgement was lost).
      for (const index of open) {
        const mine = this.alreadyGranted(commands[index]!);
        if (mine) settled[index] = { ok: true, grant: mine, replayed: false };
      }
      const pending = open.filter((index) => settled[index] === undefined);
      if (pending.length === 0) break;
      const { event, outcomes } = decideAcquisitions(
        this.projection.state,
        pending.map((index) => commands[index]!),
        this.policy,
      );
      if (!confirmed && outcomes.some((outcome) => !outcome.ok)) {
        // Refusals are answered only from a view caught up with the log: a limit defined or a
        // slot freed through another replica a moment ago must count.
        if (!(await this.projection.catchUp())) {
          for (const index of pending) settled[index] = { ok: false, error: lagging() };
          break;
        }
        confirmed = true;
        continue;
      }
      if (!event) {
        pending.forEach((index, at) => {
          settled[index] = outcomes[at];
        });
        break;
      }
      const result = await this.writer.append(event as LeaseEvent, this.projection.state.admissionSeq);
      if (result.ok) {
        this.metrics.admissionAppends += 1;
        this.metrics.grants += event.grants.length;
        pending.forEach((index, at) => {
          settled[index] = outcomes[at];
        });
        break;
      }
      if (!result.conflict) {
        for (const index of pending) settled[index] = { ok: false, error: result.error };
        break;
      }
      await this.projection.catchUp();
    }
    batch.forEach((pending, index) => {
      pending.resolve(settled[index] ?? { ok: false, error: contended() });
    });
  }

  private alreadyGranted(command: AcquireLease): Grant | undefined {
    const lease = this.projection.state.leases.get(command.leaseId);
    return lease && lease.secretHash === command.secretHash && lease.requester === command.requester
      ? grantOf(lease)
      : undefined;
  }
}

const lagging = () =>
  new LeaseError('NOT_READY', 'this replica could not catch up with the log in time; retry');

const contended = () =>
  new LeaseError('STALE_VIEW', `admission stayed contended for ${ADMISSION_ATTEMPTS} attempts; retry`);
