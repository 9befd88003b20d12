/** A page of a listing: `{items, total}`, the list shape of every REST listing. */
export interface ListPage<T> {
  items: T[];
  total: number;
}
