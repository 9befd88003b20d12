/** A page of a listing: `{items, total}`, the list shape of every REST listing. */
export interface ListPage<T> {
  items: T[];
  total: number;
}

/**
 * The `limit` and `offset` of a listing, each problem added to `errors` under its field; every
 * listing of the API checks them with the same rule and the same messages.
 */
export function limitOffset(
  filter: { limit?: number | null; offset?: number | null },
  defaults: { limit: number; max: number },
  errors: { add(field: string, message: string): void },
): { limit: number; offset: number } {
  const limit = filter.limit ?? defaults.limit;
  const offset = filter.offset ?? 0;
  if (!Number.isInteger(limit) || limit < 1 || limit > defaults.max)
    errors.add('limit', `must be from 1 to ${defaults.max}`);
  if (!Number.isInteger(offset) || offset < 0) errors.add('offset', 'must be 0 or more');
  return { limit, offset };
}

/**
 * A page of a listing that grows without bound (records, audit log): `total` counts the matches
 * exactly up to TOTAL_BOUND and says "at least" beyond it (`total_exact: false`), so that no page
 * pays for scanning a whole history; `next_cursor` continues after the page's last item at the cost
 * of the first page, whatever the depth (null on the last page).
 */
export interface HistoryPage<T> extends ListPage<T> {
  total_exact: boolean;
  next_cursor: string | null;
}

export const TOTAL_BOUND = 10_000;

/** A total counted no further than TOTAL_BOUND + 1, as the page reports it. */
export function boundedTotal(counted: number): { total: number; total_exact: boolean } {
  return counted > TOTAL_BOUND ? { total: TOTAL_BOUND, total_exact: false } : { total: counted, total_exact: true };
}

/**
 * Cursors are opaque to clients: the key of the page's last item (a record's seq, an audit entry's
 * time and id) in base64url, prefixed with the listing's name so a cursor of one listing is
 * refused by another.
 */
export function encodeCursor(listing: string, key: readonly string[]): string {
  return Buffer.from(JSON.stringify([listing, ...key])).toString('base64url');
}

/** The key in a cursor of `listing`, or undefined when the text is not one. */
export function decodeCursor(listing: string, cursor: string): string[] | undefined {
  try {
    const parsed: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    if (!Array.isArray(parsed) || parsed[0] !== listing || !parsed.every((part) => typeof part === 'string'))
      return undefined;
    return parsed.slice(1) as string[];
  } catch {
    return undefined;
  }
}

/**
 * `cursor` with `limit` and `offset` (limitOffset's rule); a cursor continues where its page
 * ended, so it takes no offset. `key` turns a decoded cursor into the listing's key, undefined when
 * it is not one.
 */
export function cursorOf<K>(
  cursor: string | null | undefined,
  offset: number,
  key: (parts: string[]) => K | undefined,
  listing: string,
  errors: { add(field: string, message: string): void },
): K | undefined {
  if (cursor === null || cursor === undefined) return undefined;
  if (offset) errors.add('offset', 'cannot be combined with cursor');
  const parts = decodeCursor(listing, cursor);
  const decoded = parts && key(parts);
  if (decoded === undefined) errors.add('cursor', 'is not a next_cursor of this listing');
  return decoded;
}
