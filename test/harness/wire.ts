import {
  AcquireResultV1,
  CancelResultV1,
  COMMAND_SUBJECTS,
  ErrorReplyV1,
  LeaseListResultV1,
  LeaseResultV1,
  LimitListResultV1,
  LimitResultV1,
  RenewManyResultV1,
  RequesterLimitResultV1,
} from '@lease/events';
import type { NatsConnection } from '@nats-io/transport-node';
import type { z } from 'zod';

/**
 * The gateway's wire protocol, spoken raw: the tests that check what a client in any
 * language sees (malformed bodies, exact error replies) send bytes, not SDK calls. Every
 * reply is validated against its documented schema.
 */
const RESULTS = {
  acquire: AcquireResultV1,
  cancel: CancelResultV1,
  renew: LeaseResultV1,
  renewMany: RenewManyResultV1,
  release: LeaseResultV1,
  revoke: LeaseResultV1,
  get: LeaseResultV1,
  list: LeaseListResultV1,
  defineLimit: LimitResultV1,
  removeLimit: LimitResultV1,
  listLimits: LimitListResultV1,
  setRequesterLimit: RequesterLimitResultV1,
} as const;
export type Verb = keyof typeof RESULTS;

export type WireReply<V extends Verb> =
  | { ok: true; result: z.infer<(typeof RESULTS)[V]> }
  | z.infer<typeof ErrorReplyV1>;

export const callGateway = async <V extends Verb>(
  nc: NatsConnection,
  verb: V,
  body: unknown,
): Promise<WireReply<V>> => {
  const data = typeof body === 'string' ? body : JSON.stringify(body);
  const msg = await nc.request(COMMAND_SUBJECTS[verb], data, { timeout: 10_000 });
  const json = JSON.parse(new TextDecoder().decode(msg.data)) as { ok?: unknown };
  if (json.ok === true)
    return { ok: true, result: RESULTS[verb].parse((json as { result: unknown }).result) } as WireReply<V>;
  return ErrorReplyV1.parse(json);
};

/** The result of a reply that must have succeeded. */
export const resultOf = <V extends Verb>(reply: WireReply<V>): z.infer<(typeof RESULTS)[V]> => {
  if (!reply.ok) throw new Error(`${reply.error.code}: ${reply.error.message}`);
  return reply.result as z.infer<(typeof RESULTS)[V]>;
};
