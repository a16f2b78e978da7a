/**
 * The one family of errors a client can see. Codes are stable across versions; each is
 * either retryable (the same request may succeed later) or final. docs/errors.md lists
 * them, and a test keeps that table and this one in step.
 */
export const ERROR_KINDS = ['validation', 'conflict', 'capacity', 'transport', 'gone', 'invariant'] as const;
export type ErrorKind = (typeof ERROR_KINDS)[number];

interface CodeInfo {
  readonly retryable: boolean;
  readonly kind: ErrorKind;
  readonly meaning: string;
}

export const ERROR_CODES = {
  INVALID_REQUEST: {
    retryable: false,
    kind: 'validation',
    meaning: 'The request is not JSON, or does not match its schema.',
  },
  PAYLOAD_TOO_LARGE: {
    retryable: false,
    kind: 'validation',
    meaning: 'The request body is larger than the gateway accepts.',
  },
  METADATA_TOO_LARGE: {
    retryable: false,
    kind: 'validation',
    meaning: "The acquire's metadata is larger than its cap once serialized.",
  },
  TTL_OUT_OF_RANGE: {
    retryable: false,
    kind: 'validation',
    meaning: 'The TTL is outside the allowed range; it is refused, never clamped.',
  },
  UNKNOWN_LIMIT: { retryable: false, kind: 'validation', meaning: 'No limit of that name is defined.' },
  SLOTS_EXCEED_LIMIT: {
    retryable: false,
    kind: 'validation',
    meaning: 'More slots were asked of a limit than it has in all: no wait can ever satisfy it.',
  },
  LIMIT_IN_USE: {
    retryable: false,
    kind: 'validation',
    meaning: 'The change would leave live leases beyond a limit (remove or shrink it after they end).',
  },
  LEASE_ID_IN_USE: {
    retryable: false,
    kind: 'validation',
    meaning: 'The caller-chosen lease id already names a lease (live or ended).',
  },
  IDEMPOTENCY_KEY_REUSED: {
    retryable: false,
    kind: 'validation',
    meaning: 'The idempotency key was used before by this requester for a different request.',
  },
  UNKNOWN_LEASE: {
    retryable: false,
    kind: 'gone',
    meaning: 'No lease with that id exists in the log (only ever answered by a caught-up projection).',
  },
  FORBIDDEN: {
    retryable: false,
    kind: 'validation',
    meaning: "The holder secret does not match the lease's: it is someone else's lease.",
  },
  LEASE_EXPIRED: {
    retryable: false,
    kind: 'gone',
    meaning: 'The lease passed its deadline before the renewal arrived; it will be revoked.',
  },
  LEASE_RELEASED: { retryable: false, kind: 'gone', meaning: 'The lease was released.' },
  LEASE_REVOKED: {
    retryable: false,
    kind: 'gone',
    meaning: 'The lease was revoked (expired or by an admin).',
  },
  LEASE_NOT_EXPIRED: {
    retryable: false,
    kind: 'validation',
    meaning: 'An expiry revocation was asked for a lease not yet past its deadline plus grace.',
  },
  NO_CAPACITY: {
    retryable: true,
    kind: 'capacity',
    meaning: 'The limit has not enough free slots now; retry later or acquire with a wait.',
  },
  REQUESTER_LIMIT_REACHED: {
    retryable: true,
    kind: 'capacity',
    meaning: 'The requester already holds as many live leases as it may.',
  },
  WAIT_TIMEOUT: {
    retryable: true,
    kind: 'capacity',
    meaning: 'The acquire waited its whole waitMs without getting its slots.',
  },
  WAIT_CANCELLED: {
    retryable: false,
    kind: 'gone',
    meaning: 'The waiting acquire was cancelled.',
  },
  STALE_VIEW: {
    retryable: true,
    kind: 'conflict',
    meaning:
      'The decision was made against an older view of the lease than the log holds; catch up and decide again.',
  },
  NOT_READY: {
    retryable: true,
    kind: 'transport',
    meaning: 'The process has not caught up with the log yet; retry shortly.',
  },
  UNAVAILABLE: {
    retryable: true,
    kind: 'transport',
    meaning: 'NATS or JetStream could not be reached, or did not answer in time.',
  },
} as const satisfies Record<string, CodeInfo>;

export type LeaseErrorCode = keyof typeof ERROR_CODES;

export const isLeaseErrorCode = (value: unknown): value is LeaseErrorCode =>
  typeof value === 'string' && Object.hasOwn(ERROR_CODES, value);

export class LeaseError extends Error {
  override readonly name = 'LeaseError';
  readonly code: LeaseErrorCode;
  readonly retryable: boolean;
  readonly details: Readonly<Record<string, unknown>> | undefined;

  constructor(
    code: LeaseErrorCode,
    message: string,
    options?: { cause?: unknown; details?: Record<string, unknown> },
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.retryable = ERROR_CODES[code].retryable;
    this.details = options?.details;
  }

  /** The wire form: what a gateway answers and a client decodes. */
  toJSON(): LeaseErrorJson {
    return {
      code: this.code,
      retryable: this.retryable,
      message: this.message,
      ...(this.details ? { details: this.details } : {}),
    };
  }
}

export interface LeaseErrorJson {
  code: LeaseErrorCode;
  retryable: boolean;
  message: string;
  details?: Readonly<Record<string, unknown>>;
}

export const leaseError = (
  code: LeaseErrorCode,
  message: string,
  details?: Record<string, unknown>,
): LeaseError => new LeaseError(code, message, details ? { details } : undefined);

/**
 * Tests the code, not the class: two copies of this package (or an error decoded from
 * the wire) must still be recognised.
 */
export const isLeaseError = (value: unknown, code?: LeaseErrorCode): value is LeaseError => {
  if (typeof value !== 'object' || value === null) return false;
  const candidate = value as { code?: unknown; retryable?: unknown };
  if (!isLeaseErrorCode(candidate.code) || typeof candidate.retryable !== 'boolean') return false;
  return code === undefined || candidate.code === code;
};

/** Rebuilds an error from its wire form; unknown codes from a newer server stay visible. */
export const leaseErrorFromJson = (json: {
  code: string;
  message?: string;
  details?: Record<string, unknown>;
}) =>
  isLeaseErrorCode(json.code)
    ? new LeaseError(
        json.code,
        json.message ?? json.code,
        json.details ? { details: json.details } : undefined,
      )
    : new LeaseError('UNAVAILABLE', `unknown error code ${json.code}: ${json.message ?? ''}`);
