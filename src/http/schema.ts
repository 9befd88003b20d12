import '../api/scalars.js';
import type { RestRoute } from '../api/rest-routes.js';
import type { StreamRoute } from '../api/stream-routes.js';
import { builder } from '../api/builder.js';
import { modules } from '../modules/modules.js';

/**
 * The API the modules make, assembled once: each module's operations give the schema its root
 * fields and the REST facade its routes (and so the OpenAPI document its operations); its streamed
 * routes join them. Registered here, in the modules' order, which is the document's.
 */
function assemble() {
  const restRoutes = new Map<string, RestRoute>();
  const streamRoutes: StreamRoute[] = [];
  for (const module of modules) {
    for (const operation of module.operations) {
      if (restRoutes.has(operation.field)) throw new Error(`${operation.field} declared twice`);
      operation.register();
      if (operation.rest) restRoutes.set(operation.field, operation.rest);
    }
    for (const route of module.streams ?? []) {
      if (streamRoutes.some((r) => r.method === route.method && r.path === route.path)) {
        throw new Error(`streamed route ${route.method} ${route.path} declared twice`);
      }
      streamRoutes.push(route);
    }
  }
  return { restRoutes, streamRoutes };
}

/** The REST facade's routes by field (`Query.name`): only these fields are reachable over REST. */
export const { restRoutes, streamRoutes } = assemble() as {
  restRoutes: ReadonlyMap<string, RestRoute>;
  streamRoutes: readonly StreamRoute[];
};

export const schema = builder.toSchema({ sortSchema: true });

// A root field without a description of its own is described by its REST route's summary,
// written once beside it: GraphiQL's docs and the OpenAPI operation then say the same thing.
for (const [name, route] of restRoutes) {
  const [rootName, fieldName] = name.split('.');
  const field = (rootName === 'Query' ? schema.getQueryType() : schema.getMutationType())?.getFields()[fieldName];
  if (field && !field.description) field.description = `${route.summary}.`;
}
