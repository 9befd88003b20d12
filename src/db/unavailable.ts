/**
 * Which failures mean "the database cannot be reached right now" (answered 503 with Retry-After,
 * and worth retrying) rather than "this statement is wrong" (a bug, answered 500). The same
 * failure reaches the service in several wrappings: node-postgres' own errors, a socket's errno,
 * PostgreSQL's SQLSTATE, and Prisma's driver-adapter and client errors around either; the cause
 * chain is followed until one of them says.
 */

/** Socket failures: the server is down, restarting, unreachable or dropped the connection. */
const socketCodes = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

/**
 * SQLSTATEs of a server that is going away or not taking work: class 08 (connection exception),
 * 57P01-57P03 (terminated by an administrator, crash shutdown, cannot connect now: starting or
 * stopping), 57014 (statement cancelled: a pooler's or the server's timeout), 53300 (too many
 * connections). A wrong database name or password is configuration, not an outage: not here.
 */
const unavailableStates = /^(08[0-9A-Z]{3}|57P0[123]|57014|53300)$/;

/** Prisma's codes for the same: cannot reach, timed out, server closed the connection, pool timeout. */
const prismaCodes = new Set(['P1001', 'P1002', 'P1008', 'P1017', 'P2024']);

/** Prisma driver-adapter error kinds (`DriverAdapterError.cause.kind`). */
const adapterKinds = new Set(['DatabaseNotReachable', 'ConnectionClosed', 'SocketTimeout', 'TooManyConnections']);

/** node-postgres and pg-pool raise these as plain Errors, without a code. */
const messagePatterns = [
  /Connection terminated/i,
  /timeout exceeded when trying to connect/i,
  /Query read timeout/i,
  /Client has encountered a connection error and is not queryable/i,
  /Client was closed and is not queryable/i,
  /Cannot use a pool after calling end on the pool/i,
  /server closed the connection unexpectedly/i,
  /terminating connection/i,
  // Embedded: the database was closed under the request (the process is stopping).
  /PGlite is clos(ed|ing)/,
];

function saysUnavailable(error: Record<string, unknown>): boolean {
  const code = typeof error.code === 'string' ? error.code : undefined;
  if (code && (socketCodes.has(code) || unavailableStates.test(code) || prismaCodes.has(code))) return true;
  const kind = typeof error.kind === 'string' ? error.kind : undefined;
  if (kind && adapterKinds.has(kind)) return true;
  // Prisma keeps the adapter's error details in `meta.driverAdapterError.cause`.
  const originalCode = typeof error.originalCode === 'string' ? error.originalCode : undefined;
  if (originalCode && unavailableStates.test(originalCode)) return true;
  const message = typeof error.message === 'string' ? error.message : '';
  return messagePatterns.some((pattern) => pattern.test(message));
}

/** Whether `error`, or anything it wraps (cause, Prisma's adapter error, GraphQL's original), satisfies `says`. */
function anyCause(error: unknown, says: (error: Record<string, unknown>) => boolean): boolean {
  const seen = new Set<unknown>();
  const pending: unknown[] = [error];
  while (pending.length) {
    const current = pending.pop();
    if (typeof current !== 'object' || current === null || seen.has(current)) continue;
    seen.add(current);
    const record = current as Record<string, unknown>;
    if (says(record)) return true;
    pending.push(
      record.cause,
      (record.meta as Record<string, unknown> | undefined)?.driverAdapterError,
      record.originalError,
    );
    if (Array.isArray(record.errors)) pending.push(...record.errors);
  }
  return false;
}

/** True when `error`, or anything it wraps, says the database could not be reached or went away. */
export const isDatabaseUnavailable = (error: unknown): boolean => anyCause(error, saysUnavailable);

/**
 * True when a write named a row that a concurrent request deleted after this one read it: a
 * foreign key violation (SQLSTATE 23503, Prisma P2003), e.g. a login whose user was removed
 * between the password check and the session insert. A race, not a bug: answered 409.
 */
export const isMissingReference = (error: unknown): boolean =>
  anyCause(error, (record) => [record.code, record.originalCode].some((code) => code === '23503' || code === 'P2003'));

/**
 * PostgreSQL forgot a named prepared statement this connection prepared (26000), or already has
 * one of that name (42P05): the connection is not the same server session from one transaction to
 * the next, which is what a pooler in transaction mode does.
 */
export function isLostPreparedStatement(error: unknown): boolean {
  // node-postgres's error carries the code; Prisma's adapter error keeps it as `originalCode`.
  return anyCause(error, (record) =>
    [record.code, record.originalCode].some((code) => code === '26000' || code === '42P05'),
  );
}
