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
