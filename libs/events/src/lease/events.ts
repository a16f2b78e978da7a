import type { z } from 'zod';
import type {
  AcquiresQueuedV1,
  GrantV1,
  LeaseEventV1,
  LeaseReleasedV1,
  LeaseRenewedV1,
  LeaseRevokedV1,
  LeasesGrantedV1,
  LimitDefinedV1,
  LimitRemovedV1,
  LimitResizedV1,
  RequesterLimitSetV1,
  WaitEndedV1,
  WaiterV1,
} from '../schemas/events.v1.js';

/** The current shape of every event: what `evolve` sees after the upcasters ran. */
export type LeaseEvent = z.infer<typeof LeaseEventV1>;
export type LeaseEventType = LeaseEvent['type'];
export type Grant = z.infer<typeof GrantV1>;
export type LimitDefined = z.infer<typeof LimitDefinedV1>;
export type LimitResized = z.infer<typeof LimitResizedV1>;
export type LimitRemoved = z.infer<typeof LimitRemovedV1>;
export type RequesterLimitSet = z.infer<typeof RequesterLimitSetV1>;
export type LeasesGranted = z.infer<typeof LeasesGrantedV1>;
export type LeaseRenewed = z.infer<typeof LeaseRenewedV1>;
export type LeaseReleased = z.infer<typeof LeaseReleasedV1>;
export type LeaseRevoked = z.infer<typeof LeaseRevokedV1>;
export type Waiter = z.infer<typeof WaiterV1>;
export type AcquiresQueued = z.infer<typeof AcquiresQueuedV1>;
export type WaitEnded = z.infer<typeof WaitEndedV1>;

export const EVENT_VERSION = 1 as const;

/** An event as stored: its stream sequence is what conditional appends and the audit name. */
export interface StoredEvent {
  readonly seq: number;
  readonly event: LeaseEvent;
}

/** Admission events serialize on one subject; the rest live on their lease's own subject. */
export const isAdmissionEvent = (event: LeaseEvent): boolean =>
  event.type === 'LimitDefined' ||
  event.type === 'LimitResized' ||
  event.type === 'LimitRemoved' ||
  event.type === 'RequesterLimitSet' ||
  event.type === 'LeasesGranted' ||
  event.type === 'AcquiresQueued' ||
  event.type === 'WaitEnded';
