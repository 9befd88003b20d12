// Only imports: each module registers its types, queries, mutations and REST routes.
import '../api/scalars.js';
import '../modules/user/user.graphql.js';
import '../modules/org/org.graphql.js';
import '../modules/auth/auth.graphql.js';
import '../modules/api-key/api-key.graphql.js';
import '../modules/manifest/manifest.graphql.js';
import '../modules/tool/tool.graphql.js';
import '../modules/gateway/gateway.graphql.js';
import './gateway-edge.js';
import '../modules/capability-token/capability-token.graphql.js';
import '../modules/record/record.graphql.js';
import '../modules/approval/approval.graphql.js';
import '../modules/webhook/webhook.graphql.js';
import '../modules/policy/policy.graphql.js';
import '../modules/agent/agent.graphql.js';
import '../modules/marketplace/template.graphql.js';
import '../modules/marketplace/purchase.graphql.js';
import '../modules/audit/audit.graphql.js';
import '../modules/oauth/oauth.graphql.js';
import '../modules/sso/sso.graphql.js';
import { restRoutes } from '../api/rest-routes.js';
import { builder } from '../api/builder.js';

export const schema = builder.toSchema({ sortSchema: true });

// A root field without a description of its own is described by its REST route's summary,
// written once beside it: GraphiQL's docs and the OpenAPI operation then say the same thing.
for (const [name, route] of restRoutes) {
  const [rootName, fieldName] = name.split('.');
  const field = (rootName === 'Query' ? schema.getQueryType() : schema.getMutationType())?.getFields()[fieldName];
  if (field && !field.description) field.description = `${route.summary}.`;
}
