/**
 * The clock model (ADR 0003). Three clocks are read, each in one place:
 * - the gateway's wall clock sets `atMs` and `deadlineMs` when it decides; those become
 *   data in the events, so a replay never reads a clock;
 * - the repossessor's wall clock decides when `deadlineMs + graceMs` has passed; the grace
 *   absorbs skew between its clock and the gateway's;
 * - the holder's monotonic clock, read *before* it sends a request, bounds its own lease:
 *   it considers the lease lost at `sentAt + ttlMs`, which is never later than the
 *   gateway's `deadlineMs` (the gateway decided after the request was sent), and so always
 *   before the repossessor can revoke.
 * The pure core takes time as an input; nothing in it reads a clock.
 */
export interface Clock {
  /** Wall-clock milliseconds since the epoch: what goes into events. */
  nowMs(): number;
  /** Monotonic milliseconds: what local deadlines are measured on. */
  monotonicMs(): number;
}

/** The holder's local deadline: measured from before the request was sent, on the monotonic clock. */
export const localDeadlineMs = (sentAtMonotonicMs: number, ttlMs: number): number =>
  sentAtMonotonicMs + ttlMs;

/** When a holder renews: a fraction of the TTL after its last confirmed send (simlock and etcd use about a third). */
export const RENEW_FRACTION = 1 / 3;
export const renewAtMs = (sentAtMonotonicMs: number, ttlMs: number, fraction = RENEW_FRACTION): number =>
  sentAtMonotonicMs + Math.floor(ttlMs * fraction);

/** A clock tests move by hand: skew between two of them and jumps of the wall clock are just numbers. */
export class FakeClock implements Clock {
  constructor(
    private wallMs = 1_700_000_000_000,
    private monoMs = 0,
  ) {}

  nowMs(): number {
    return this.wallMs;
  }

  monotonicMs(): number {
    return this.monoMs;
  }

  /** Time passes: both clocks move together. */
  advance(ms: number): void {
    this.wallMs += ms;
    this.monoMs += ms;
  }

  /** The wall clock is set (NTP step, operator): the monotonic clock does not move. */
  jumpWall(ms: number): void {
    this.wallMs += ms;
  }
}
