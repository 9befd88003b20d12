import type { ObjectRef } from '@pothos/core';
import type { ListPage } from '../lib/list-page.js';
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
