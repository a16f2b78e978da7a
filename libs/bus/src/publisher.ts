import { JetStreamApiError } from '@nats-io/jetstream';
import { createInbox, headers, type Msg, type NatsConnection } from '@nats-io/transport-node';

/** The options of a conditional append: the part of JetStream's publish options the log uses. */
export interface PublishOptions {
  readonly expect?: { readonly lastSubjectSequence?: number };
  readonly msgID?: string;
  readonly timeout?: number;
}

/** What appending needs of a JetStream client: `js.publish` fits, and so does `createPublisher`. */
export interface Publisher {
  publish(
    subject: string,
    data: Uint8Array,
    options?: PublishOptions,
  ): Promise<{ seq: number; duplicate: boolean }>;
}

export interface PipelinedPublisher extends Publisher {
  /** Rejects what is still waiting for its acknowledgement and stops listening. */
  close(): void;
}

export const PUBLISH_TIMEOUT_DEFAULT_MS = 5_000;
/** How often acknowledgements that are overdue are looked for. */
const SWEEP_MS = 100;

interface Pending {
  readonly deadline: number;
  readonly resolve: (ack: { seq: number; duplicate: boolean }) => void;
  readonly reject: (error: Error) => void;
}

const utf8 = new TextDecoder();

/**
 * JetStream publishes pipelined on one connection: each message carries a reply subject
 * of one inbox, and one subscription matches acknowledgements to publishes through a map.
 * `js.publish` is a full request per message (a timer, a mux entry, and an Error built on
 * every resolved request: the most expensive thing the gateway did under renewal load);
 * this speaks the same protocol for the options the coordinator uses, with one sweep
 * timer for all timeouts. An acknowledgement with an error rejects with JetStream's own
 * `JetStreamApiError` (its `code` is the err_code, e.g. 10071), as `js.publish` does; no
 * answer in time, no responders and a closed connection reject with a plain Error: the
 * message may or may not be stored.
 */
export const createPublisher = (nc: NatsConnection): PipelinedPublisher => {
  const prefix = `${createInbox()}.`;
  const pending = new Map<string, Pending>();
  let next = 0;

  const settle = (id: string, outcome: (entry: Pending) => void) => {
    const entry = pending.get(id);
    if (!entry) return; // late, after its timeout
    pending.delete(id);
    outcome(entry);
  };

  const onAck = (msg: Msg) => {
    const id = msg.subject.slice(prefix.length);
    if (msg.headers?.code === 503 || msg.data.length === 0) {
      settle(id, (entry) => entry.reject(new Error('no responders: JetStream did not answer the publish')));
      return;
    }
    let ack: {
      seq?: unknown;
      duplicate?: unknown;
      error?: { code: number; err_code: number; description: string };
    };
    try {
      ack = JSON.parse(utf8.decode(msg.data));
    } catch {
      settle(id, (entry) => entry.reject(new Error('unreadable JetStream acknowledgement')));
      return;
    }
    const { error } = ack;
    if (error) settle(id, (entry) => entry.reject(new JetStreamApiError(error)));
    else if (typeof ack.seq !== 'number')
      settle(id, (entry) => entry.reject(new Error('JetStream acknowledgement without a sequence')));
    else {
      const seq = ack.seq;
      settle(id, (entry) => entry.resolve({ seq, duplicate: ack.duplicate === true }));
    }
  };

  const subscription = nc.subscribe(`${prefix}*`, {
    callback: (error, msg) => {
      if (!error) onAck(msg);
    },
  });

  const sweep = setInterval(() => {
    const now = performance.now();
    for (const [id, entry] of pending)
      if (entry.deadline <= now)
        settle(id, (overdue) => overdue.reject(new Error('JetStream publish timed out')));
  }, SWEEP_MS);
  sweep.unref();

  return {
    publish(subject, data, options = {}) {
      if (nc.isClosed()) return Promise.reject(new Error('the connection is closed'));
      const id = String(next++);
      const header = headers();
      const expected = options.expect?.lastSubjectSequence;
      if (expected !== undefined) header.set('Nats-Expected-Last-Subject-Sequence', String(expected));
      if (options.msgID !== undefined) header.set('Nats-Msg-Id', options.msgID);
      return new Promise((resolve, reject) => {
        pending.set(id, {
          deadline: performance.now() + (options.timeout ?? PUBLISH_TIMEOUT_DEFAULT_MS),
          resolve,
          reject,
        });
        try {
          nc.publish(subject, data, { reply: `${prefix}${id}`, headers: header });
        } catch (error) {
          settle(id, (entry) => entry.reject(error as Error));
        }
      });
    },
    close() {
      clearInterval(sweep);
      subscription.unsubscribe();
      for (const id of [...pending.keys()])
        settle(id, (entry) => entry.reject(new Error('the publisher was closed')));
    },
  };
};
