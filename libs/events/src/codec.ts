import { z } from 'zod';
import { LeaseError, leaseError } from './errors.js';
import { EVENT_VERSION, type LeaseEvent } from './lease/events.js';
import { LeaseEventV1 } from './schemas/events.v1.js';

const utf8Decoder = new TextDecoder('utf-8', { fatal: true });

/**
 * The bytes an event is stored as. `Buffer.from` rather than `TextEncoder`: four times
 * faster on strings this short, and every append goes through here (Node only, as is the
 * whole project).
 */
export const encodeEvent = (event: LeaseEvent): Uint8Array => Buffer.from(JSON.stringify(event));

export type DecodeProblem = 'corrupt' | 'unknown-type' | 'unknown-version' | 'invalid';
export type DecodedEvent =
  | { ok: true; event: LeaseEvent }
  | { ok: false; problem: DecodeProblem; message: string };

/**
 * Upcasters turn a stored older version into the next one, until the current version:
 * `UPCASTERS[type][v]` maps version v to v + 1. Version 1 is the only published one so
 * far, so there is none yet; a published schema never changes, a new one adds a step here.
 */
type Upcaster = (event: Record<string, unknown>) => Record<string, unknown>;
const UPCASTERS: Readonly<Record<string, Readonly<Record<number, Upcaster>>>> = {};

/**
 * The schema with zod's generated fast path (`z.compile`): the same answers, several times
 * faster on valid input; invalid input falls back to the runtime parser, which names the
 * issues. Hot schemas must stay compilable (no `z.json()`, no `z.lazy`): a schema with a
 * reference cycle silently keeps the runtime parser, so codec.unit.test checks them.
 * Cached per schema, so an edge may pass any schema on every call.
 */
export const compiled = <S extends z.ZodType>(schema: S): S => {
  let fast = COMPILED.get(schema);
  if (!fast) {
    fast = z.compile(schema);
    COMPILED.set(schema, fast);
  }
  return fast as S;
};
const COMPILED = new WeakMap<z.ZodType, z.ZodType>();

const EVENT_SCHEMA = compiled(LeaseEventV1);

const KNOWN_TYPES: ReadonlySet<string> = new Set(
  LeaseEventV1.options.map((option) => option.shape.type.value),
);

/**
 * The decode boundary for everything read from the log. Corrupt bytes, an unknown type
 * (a newer writer) or an invalid body come back as a problem to log, count and skip:
 * never a throw, so no consumer crashes on what it reads.
 */
export const decodeEvent = (data: Uint8Array | string): DecodedEvent => {
  let raw: unknown;
  try {
    raw = JSON.parse(typeof data === 'string' ? data : utf8Decoder.decode(data));
  } catch (cause) {
    return { ok: false, problem: 'corrupt', message: `not UTF-8 JSON: ${(cause as Error).message}` };
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    return { ok: false, problem: 'corrupt', message: 'not a JSON object' };
  }
  let body = raw as Record<string, unknown>;
  const type = body.type;
  if (typeof type !== 'string' || !KNOWN_TYPES.has(type)) {
    return { ok: false, problem: 'unknown-type', message: `unknown event type ${JSON.stringify(type)}` };
  }
  let version = body.v;
  while (typeof version === 'number' && version < EVENT_VERSION) {
    const step = UPCASTERS[type]?.[version];
    if (!step) break;
    body = step(body);
    version = body.v;
  }
  if (version !== EVENT_VERSION) {
    return {
      ok: false,
      problem: 'unknown-version',
      message: `${type} version ${JSON.stringify(body.v)} is not known`,
    };
  }
  const parsed = EVENT_SCHEMA.safeParse(body);
  if (!parsed.success)
    return { ok: false, problem: 'invalid', message: `${type}: ${summarize(parsed.error)}` };
  return { ok: true, event: parsed.data };
};

/** Bounds what a request body may be before it is even parsed. */
export const REQUEST_BYTES_MAX = 64 * 1024;

export type Parsed<T> = { ok: true; value: T } | { ok: false; error: LeaseError };

/** The edge: bytes from a client to a validated request, or INVALID_REQUEST / PAYLOAD_TOO_LARGE. */
export const parseRequest = <S extends z.ZodType>(
  schema: S,
  data: Uint8Array,
  maxBytes = REQUEST_BYTES_MAX,
): Parsed<z.infer<S>> => {
  if (data.length > maxBytes) {
    return {
      ok: false,
      error: leaseError('PAYLOAD_TOO_LARGE', `request is ${data.length} bytes, more than ${maxBytes}`, {
        bytes: data.length,
        maxBytes,
      }),
    };
  }
  let raw: unknown;
  try {
    raw = JSON.parse(utf8Decoder.decode(data));
  } catch (cause) {
    return { ok: false, error: new LeaseError('INVALID_REQUEST', 'request is not UTF-8 JSON', { cause }) };
  }
  const parsed = compiled(schema).safeParse(raw);
  if (!parsed.success) {
    return {
      ok: false,
      error: leaseError('INVALID_REQUEST', summarize(parsed.error), { issues: parsed.error.issues }),
    };
  }
  return { ok: true, value: parsed.data };
};

const summarize = (error: z.ZodError): string =>
  error.issues
    .slice(0, 5)
    .map((issue) => `${issue.path.join('.') || '(root)'}: ${issue.message}`)
    .join('; ');
