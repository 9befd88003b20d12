import { GraphQLError, type GraphQLErrorOptions } from 'graphql';

/**
 * The one error type of the service. It is a GraphQLError so that GraphQL reports it as is
 * (`extensions.code`) and SOFA takes its HTTP status from `extensions.http`; src/http/envelope.ts
 * is the one place that turns it into the REST wire envelopes.
 */
export const errorStatus = {
  BAD_REQUEST: 400,
  AUTHENTICATION_REQUIRED: 401,
  INVALID_TOKEN: 401,
  FORBIDDEN: 403,
  NOT_FOUND: 404,
  METHOD_NOT_ALLOWED: 405,
  CONFLICT: 409,
  INVALID_STATE_TRANSITION: 409,
  PAYLOAD_TOO_LARGE: 413,
  VALIDATION_ERROR: 422,
  /** An Idempotency-Key sent again with a different request: the key belongs to the first one. */
  IDEMPOTENCY_KEY_REUSED: 422,
  POLICY_VIOLATION: 429,
  INTERNAL_ERROR: 500,
  SERVICE_UNAVAILABLE: 503,
} as const;

export type ErrorCode = keyof typeof errorStatus;

/** Codes that travel in the `{"detail": {...}}` envelope (authentication and authorization). */
export const authErrorCodes: ReadonlySet<ErrorCode> = new Set([
  'AUTHENTICATION_REQUIRED',
  'INVALID_TOKEN',
  'FORBIDDEN',
]);

export interface FieldError {
  field: string;
  message: string;
  /** Where in the field's text the problem is, for fields with a syntax (a policy condition). */
  position?: TextPosition;
}

export interface TextPosition {
  /** 0-based offset in the text. */
  offset: number;
  /** 1-based. */
  line: number;
  /** 1-based. */
  column: number;
}

/**
 * Where a caller stands against a limit once a request was counted: what the edge reports in the
 * `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset` headers (src/http/lifecycle.ts).
 */
export interface RateQuota {
  limit: number;
  /** What is left in the window; never below zero, even for a request counted past the limit. */
  remaining: number;
  /** Unix seconds when the window ends. */
  resetAt: number;
}

export class AppError extends GraphQLError {
  readonly code: ErrorCode;
  readonly status: number;
  readonly details: Record<string, unknown>;
  /**
   * The limit a refused request was counted against, as data: the edge reports it in the
   * X-RateLimit headers (src/http/lifecycle.ts). Never in the error's body.
   */
  declare readonly quota?: RateQuota;

  constructor(
    code: ErrorCode,
    message: string,
    options: {
      details?: Record<string, unknown>;
      headers?: Record<string, string>;
      /** The rate limit the request was refused by (a 429's quota). */
      quota?: RateQuota;
      /** Where in a GraphQL document the problem is: reported as the error's `locations`. */
      at?: Pick<GraphQLErrorOptions, 'nodes' | 'source' | 'positions'>;
    } = {},
  ) {
    const status = errorStatus[code];
    const details = options.details ?? {};
    // A client's error (4xx) is an answer, not a fault: nothing reads where it was made. Its stack,
    // captured twice (Error's constructor, then GraphQLError's), was half of what making one cost
    // (19–21 µs against 10–12, 20 frames deep), paid on every refused request: a flood of bad keys
    // or of requests past a limit. A 5xx keeps its stack for the log.
    const stackTraceLimit = Error.stackTraceLimit;
    if (status < 500) Error.stackTraceLimit = 0;
    try {
      super(message, {
        nodes: options.at?.nodes,
        source: options.at?.source,
        positions: options.at?.positions,
        extensions: {
          code,
          ...(Object.keys(details).length ? { details } : {}),
          http: { status, ...(options.headers ? { headers: options.headers } : {}) },
        },
      });
    } finally {
      Error.stackTraceLimit = stackTraceLimit;
    }
    this.name = 'AppError';
    this.code = code;
    this.status = status;
    this.details = details;
    if (options.quota) this.quota = options.quota;
  }
}

export const authenticationRequired = () =>
  new AppError('AUTHENTICATION_REQUIRED', 'This operation needs a bearer token or an API key');
/** A resource of another org, or an org that does not exist: its existence is never revealed. */
export const orgNotFound = () => new AppError('NOT_FOUND', 'Organization not found');
/** Authenticated, but the role or the API key's scopes do not allow the operation. */
export const operationForbidden = () =>
  new AppError('FORBIDDEN', 'Your role or API key scopes do not allow this operation');
export const notFound = (what: string) => new AppError('NOT_FOUND', `${what} not found`);
export const conflict = (message: string, details?: Record<string, unknown>) =>
  new AppError('CONFLICT', message, { details });
/** A write that named a row a concurrent request deleted meanwhile (src/db/unavailable.ts, isMissingReference). */
export const referenceGone = () =>
  new AppError(
    'CONFLICT',
    'Something this request refers to (a user, an agent, a tool…) was removed while it ran; reload and retry',
  );
export const forbidden = (message = 'You are not allowed to do this') => new AppError('FORBIDDEN', message);
export const validationError = (errors: FieldError[]) =>
  new AppError('VALIDATION_ERROR', errors.map((e) => `${e.field}: ${e.message}`).join('; '), {
    details: { errors },
  });

/**
 * How long a client should wait before retrying when the database cannot be reached: long enough
 * that a fleet of retrying agents does not hammer a database coming back, short enough for a
 * failover or a restart, which take seconds.
 */
export const DATABASE_RETRY_AFTER_SECONDS = 2;

/**
 * 503: the request needs the database and cannot reach it. `details` tells what happened to the
 * request anyway (an execute answers its interaction id when a record may exist or will).
 */
export const serviceUnavailable = (
  message = 'The database cannot be reached at the moment; retry shortly',
  details?: Record<string, unknown>,
) =>
  new AppError('SERVICE_UNAVAILABLE', message, {
    details,
    headers: { 'Retry-After': String(DATABASE_RETRY_AFTER_SECONDS) },
  });

/** Collects field problems and throws them together, so a caller fixes a payload in one go. */
export class FieldErrors {
  readonly errors: FieldError[] = [];
  add(field: string, message: string, detail: Omit<FieldError, 'field' | 'message'> = {}): void {
    this.errors.push({ field, message, ...detail });
  }
  throwIfAny(): void {
    if (this.errors.length) throw validationError(this.errors);
  }
}

/** Unique-constraint violations from Prisma (P2002), whichever driver adapter raised them. */
export function isUniqueViolation(error: unknown): boolean {
  const e = error as { code?: string; cause?: { code?: string }; meta?: unknown } | null;
  return e?.code === 'P2002' || e?.cause?.code === '23505';
}

/**
 * Runs a write on one row and answers 404 when the row is gone by the time the write runs: Prisma
 * raises P2025 when an update or delete matches no row, e.g. when a concurrent request deleted it
 * first (the read before it, if any, still saw the row).
 */
export async function notFoundIfGone<T>(what: string, write: Promise<T>): Promise<T> {
  try {
    return await write;
  } catch (error) {
    if ((error as { code?: string } | null)?.code === 'P2025') throw notFound(what);
    throw error;
  }
}
