import type { Projection } from '@lease/bus';
import {
  type AcquireLease,
  type AcquireOutcome,
  type DefineLimit,
  decide,
  decideAcquisitions,
  decideQueue,
  type EndWait,
  type Grant,
  grantOf,
  LeaseError,
  type LeaseEvent,
  type Policy,
  type RemoveLimit,
  type SetRequesterLimit,
  type Waiter,
} from '@lease/events';
import type { Logger } from 'pino';
import type { GatewayMetrics } from '../metrics.js';
import type { LogWriter } from './log-writer.js';

/** Decide-append rounds before a pass gives up with a retryable STALE_VIEW (heavy contention). */
export const ADMISSION_ATTEMPTS = 20;

/** Admission commands that are not acquires: they change what may be granted, or end a wait. */
export type AdminCommand = DefineLimit | RemoveLimit | SetRequesterLimit | EndWait;
export type AdminOutcome = { ok: true } | { ok: false; error: LeaseError };
/** An acquire is granted, refused, or put in its limits' queues to wait. */
export type AdmissionOutcome = AcquireOutcome | { ok: true; queued: Waiter };

type Pending =
  | {
      kind: 'acquire';
      command: (nowMs: number) => AcquireLease;
      resolve: (outcome: AdmissionOutcome) => void;
    }
  | { kind: 'admin'; command: (nowMs: number) => AdminCommand; resolve: (outcome: AdminOutcome) => void };

const lagging = () =>
  new LeaseError('NOT_READY', 'this replica could not catch up with the log in time; retry');
const contended = () =>
  new LeaseError('STALE_VIEW', `admission stayed contended for ${ADMISSION_ATTEMPTS} attempts; retry`);

/**
 * The admission subject's single writer inside this process. Acquires that queue up while
 * an append is in flight are decided together and carried by one append (group commit);
 * across replicas, the conditional append on the admission subject serializes (ADR 0002).
 * Every refusal is confirmed on a view caught up with the log before it is answered.
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

  acquire(command: (nowMs: number) => AcquireLease): Promise<AdmissionOutcome> {
    return new Promise((resolve) => this.enqueue({ kind: 'acquire', command, resolve }));
  }

  admin(command: (nowMs: number) => AdminCommand): Promise<AdminOutcome> {
    return new Promise((resolve) => this.enqueue({ kind: 'admin', command, resolve }));
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
        if (head.kind === 'admin') {
          this.queue.shift();
          await this.runAdmin(head);
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

  private async runAdmin(pending: Extract<Pending, { kind: 'admin' }>): Promise<void> {
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

  /**
   * One pass: grant what can be granted (one append), and put the acquires that may wait
   * and found no slot into the queue (another append, in a later round of the same pass).
   */
  private async runAcquires(batch: Extract<Pending, { kind: 'acquire' }>[]): Promise<void> {
    const commands = batch.map((pending) => pending.command(this.nowMs()));
    const settled: (AdmissionOutcome | undefined)[] = batch.map(() => undefined);
    const mayWait = (index: number) => (commands[index]!.waitUntilMs ?? 0) > commands[index]!.nowMs;
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
      const waiting = pending.filter((index, at) => {
        const outcome = outcomes[at]!;
        return !outcome.ok && outcome.error.code === 'NO_CAPACITY' && mayWait(index);
      });
      if (event) {
        const result = await this.writer.append(event as LeaseEvent, this.projection.state.admissionSeq);
        if (result.ok) {
          this.metrics.admissionAppends += 1;
          this.metrics.grants += event.grants.length;
          // Those that may wait are decided again in the next round, on the state with these grants.
          pending.forEach((index, at) => {
            if (!waiting.includes(index)) settled[index] = outcomes[at];
          });
          continue;
        }
        if (!result.conflict) {
          for (const index of pending) settled[index] = { ok: false, error: result.error };
          break;
        }
        await this.projection.catchUp();
        continue;
      }
      pending.forEach((index, at) => {
        if (!waiting.includes(index)) settled[index] = outcomes[at];
      });
      if (waiting.length === 0) break;
      const queue = decideQueue(
        this.projection.state,
        waiting.map((index) => commands[index]!),
      );
      const queued = () =>
        waiting.forEach((index, at) => {
          const outcome = queue.outcomes[at]!;
          settled[index] = outcome.ok ? { ok: true, queued: outcome.waiter } : outcome;
        });
      if (!queue.event) {
        queued();
        break;
      }
      const result = await this.writer.append(queue.event, this.projection.state.admissionSeq);
      if (result.ok) {
        queued();
        break;
      }
      if (!result.conflict) {
        for (const index of waiting) settled[index] = { ok: false, error: result.error };
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
