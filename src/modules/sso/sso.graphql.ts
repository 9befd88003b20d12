import { builder } from '../../api/builder.js';
import { principalOf } from '../../api/context.js';
import { mutation, query } from '../../api/operations.js';
import { SessionLogin } from '../auth/auth.graphql.js';
import { UserRoleEnum } from '../user/user.graphql.js';
import type { SsoView } from './sso.service.js';

const tag = 'Single sign-on';
const ssoPath = '/orgs/:org_id/sso';

const SsoConfiguration = builder.objectRef<SsoView>('SsoConfiguration').implement({
  description: "An organization's OpenID provider for operators' single sign-on.",
  fields: (t) => ({
    org_id: t.exposeID('org_id'),
    issuer: t.exposeString('issuer'),
    client_id: t.exposeString('client_id'),
    client_secret: t.exposeString('client_secret', { description: 'Always "[redacted]": the secret is write-only.' }),
    allowed_domains: t.exposeStringList('allowed_domains', {
      description: 'Email domains that may sign in (the ID token must carry a verified email at one of them).',
    }),
    default_role: t.expose('default_role', { type: UserRoleEnum }),
    role_claim: t.exposeString('role_claim', { nullable: true }),
    role_map: t.expose('role_map', { type: 'JSON', nullable: true }),
    scopes: t.exposeStringList('scopes'),
    enforce: t.exposeBoolean('enforce', {
      description: "Password login is refused for the organization's users except admins (break-glass).",
    }),
    allow_private_network: t.exposeBoolean('allow_private_network'),
    redirect_uri: t.exposeString('redirect_uri', { description: 'The redirect URI to register with the provider.' }),
    sign_in_url: t.exposeString('sign_in_url', { description: "Where the organization's operators start a sign-in." }),
    created_at: t.expose('created_at', { type: 'Timestamp' }),
    updated_at: t.expose('updated_at', { type: 'Timestamp' }),
  }),
});

const ssoConfigurationQuery = query('sso_configuration', {
  field: (t) =>
    t.field({
      type: SsoConfiguration,
      args: { org_id: t.arg.id({ required: true }) },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'sso:read' } }),
      resolve: (_, args, ctx) => ctx.services.sso.get(String(args.org_id)),
    }),
  rest: {
    method: 'GET',
    path: ssoPath,
    tag,
    summary: "Read the organization's single sign-on configuration (the client secret redacted)",
    auth: ['bearer'],
  },
});

const configureSsoMutation = mutation('configure_sso', {
  field: (t) =>
    t.field({
      type: SsoConfiguration,
      description:
        "Sets the organization's OpenID provider (admins only). The issuer's discovery document is read at once " +
        '(through the outbound address policy: a private or loopback provider needs `allow_private_network` and its ' +
        "range in the deployment's `OUTBOUND_PRIVATE_NETWORKS`); one that " +
        'cannot be read is a 422 naming `issuer`. `client_secret` is write-only and sealed at rest; omitted or ' +
        '"[redacted]" on a later call, the stored one is kept. `role_map` maps values of the ID token claim ' +
        '`role_claim` (a string or a list) to roles; the most privileged match wins, `default_role` otherwise.',
      args: {
        org_id: t.arg.id({ required: true }),
        issuer: t.arg.string({ required: true }),
        client_id: t.arg.string({ required: true }),
        client_secret: t.arg.string(),
        allowed_domains: t.arg.stringList({ required: true }),
        default_role: t.arg({
          type: UserRoleEnum,
          description: 'The role of a new user no mapping names (default viewer).',
        }),
        role_claim: t.arg.string(),
        role_map: t.arg({ type: 'JSON' }),
        scopes: t.arg.stringList({ description: 'Requested scopes; `openid` and `email` are always added.' }),
        enforce: t.arg.boolean(),
        allow_private_network: t.arg.boolean(),
      },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'sso:configure' } }),
      resolve: (_, args, ctx) => ctx.services.sso.configure(String(args.org_id), args, principalOf(ctx)),
    }),
  rest: {
    method: 'PUT',
    path: ssoPath,
    tag,
    summary: "Set the organization's single sign-on (OpenID Connect) configuration",
    auth: ['bearer'],
  },
});

const deleteSsoConfigurationMutation = mutation('delete_sso_configuration', {
  field: (t) =>
    t.boolean({
      args: { org_id: t.arg.id({ required: true }) },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'sso:configure' } }),
      resolve: (_, args, ctx) => ctx.services.sso.remove(String(args.org_id), principalOf(ctx)),
    }),
  rest: {
    method: 'DELETE',
    path: ssoPath,
    status: 204,
    tag,
    summary: "Remove the organization's single sign-on; its users sign in with passwords again",
    auth: ['bearer'],
  },
});

// No credentials: the one-time code is the credential.
const ssoExchangeMutation = mutation('sso_exchange', {
  field: (t) =>
    t.field({
      type: SessionLogin,
      description:
        'Exchanges the one-time code that single sign-on handed the console (`/console/sso#code=…`) for what a login ' +
        'answers. Each code works once, for 60 seconds.',
      args: { code: t.arg.string({ required: true }) },
      resolve: (_, args, ctx) => ctx.services.sso.exchange(args.code),
    }),
  rest: {
    method: 'POST',
    path: '/auth/sso/exchange',
    tag: 'Sessions',
    summary: 'Exchange a single sign-on code for an access token, a refresh token and the user',
    auth: [],
    extraErrors: ['401'],
  },
});

/** The operations of this file, in the order the OpenAPI document lists their routes. */
export const ssoOperations = [
  ssoConfigurationQuery,
  configureSsoMutation,
  deleteSsoConfigurationMutation,
  ssoExchangeMutation,
];
