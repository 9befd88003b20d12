import type { ObjectRef } from '@pothos/core';
import { builder } from './builder.js';

export interface ListPage<T> {
  items: T[];
  total: number;
}

/** `{items, total}`: the list shape of every REST listing. */
export function listType<T>(name: string, item: ObjectRef<any, T>) {
  return builder.objectRef<ListPage<T>>(name).implement({
    fields: (t) => ({
      items: t.field({ type: [item], resolve: (page) => page.items }),
      total: t.exposeInt('total'),
    }),
  });
}
