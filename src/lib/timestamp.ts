/**
 * The one parser of timestamps the API accepts (GraphQL `Timestamp` arguments and query strings):
 * ISO 8601 dates (`2026-01-01`, UTC midnight) or date-times with seconds optional, a fraction
 * optional and an explicit zone (`Z` or `±hh:mm`), so a value never depends on the server's zone.
 */
const iso8601 = /^(\d{4})-(\d{2})-(\d{2})(?:T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2}))?$/;

export function parseTimestamp(value: unknown): Date | undefined {
  const match = typeof value === 'string' ? iso8601.exec(value) : null;
  if (!match) return undefined;
  const [year, month, day] = match.slice(1, 4).map(Number);
  // Date would roll 2026-02-30 over into March.
  if (month < 1 || month > 12 || day < 1 || day > new Date(Date.UTC(year, month, 0)).getUTCDate()) return undefined;
  const date = new Date(value as string);
  return Number.isNaN(date.getTime()) ? undefined : date;
}

export const timestampProblem = 'must be an ISO 8601 timestamp with a time zone, e.g. 2026-01-01T00:00:00.000Z';
