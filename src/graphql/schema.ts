// Only imports: each module registers its types, queries, mutations and REST routes.
import './scalars.js';
import '../modules/user/user.types.js';
import '../modules/org/org.types.js';
import '../modules/auth/auth.types.js';
import '../modules/api-key/api-key.types.js';
import '../modules/manifest/manifest.types.js';
import '../modules/tool/tool.types.js';
import '../modules/gateway/gateway.types.js';
import '../modules/capability-token/capability-token.types.js';
import '../modules/record/record.types.js';
import '../modules/approval/approval.types.js';
import '../modules/webhook/webhook.types.js';
import '../modules/policy/policy.types.js';
import '../modules/agent/agent.types.js';
import '../modules/marketplace/template.types.js';
import '../modules/marketplace/purchase.types.js';
import '../modules/audit/audit.types.js';
import '../modules/oauth/oauth.types.js';
import { restRoutes } from '../http/rest-routes.js';
import { builder } from './builder.js';

export const schema = builder.toSchema({ sortSchema: true });

// A root field without a description of its own is described by its REST route's summary,
// written once beside it: GraphiQL's docs and the OpenAPI operation then say the same thing.
for (const [name, route] of restRoutes) {
  const [rootName, fieldName] = name.split('.');
  const field = (rootName === 'Query' ? schema.getQueryType() : schema.getMutationType())?.getFields()[fieldName];
  if (field && !field.description) field.description = `${route.summary}.`;
}
