import type { ObjectRef } from '@pothos/core';
import { type HistoryPage, type ListPage, TOTAL_BOUND } from '../lib/list-page.js';
import { builder } from './builder.js';

/** `{items, total}`: the list shape of every REST listing. */
// biome-ignore lint/suspicious/noExplicitAny: any item type's ref, whatever its Pothos shape parameter
export function listType<T>(name: string, item: ObjectRef<any, T>) {
  return builder.objectRef<ListPage<T>>(name).implement({
    fields: (t) => ({
      items: t.field({ type: [item], resolve: (page) => page.items }),
      total: t.exposeInt('total'),
    }),
  });
}

/** `{items, total, total_exact, next_cursor}`: a listing of a history that grows without bound. */
// biome-ignore lint/suspicious/noExplicitAny: any item type's ref, whatever its Pothos shape parameter
export function historyListType<T>(name: string, item: ObjectRef<any, T>) {
  return builder.objectRef<HistoryPage<T>>(name).implement({
    fields: (t) => ({
      items: t.field({ type: [item], resolve: (page) => page.items }),
      total: t.exposeInt('total', {
        description: `How many match: exact up to ${TOTAL_BOUND}; beyond, ${TOTAL_BOUND} and \`total_exact\` false.`,
      }),
      total_exact: t.exposeBoolean('total_exact', {
        description: `False when more than ${TOTAL_BOUND} match and \`total\` is a lower bound.`,
      }),
      next_cursor: t.exposeString('next_cursor', {
        nullable: true,
        description: 'Pass as `cursor` for the page after this one, as fast at any depth; null on the last page.',
      }),
    }),
  });
}

/** The `cursor` argument of a history listing. */
export const cursorArgDescription =
  "A page's `next_cursor`: the items after that page, newest first. Not with `offset`.";
