import { builder } from '../../api/builder.js';
import { principalOf } from '../../api/context.js';
import { mutation, query } from '../../api/operations.js';
import { UserRef } from '../user/user.graphql.js';

export const OrganizationRef = builder.prismaObject('Organization', {
  fields: (t) => ({
    org_id: t.exposeID('id'),
    name: t.exposeString('name'),
    slug: t.exposeString('slug'),
    operator_rate_limit_per_minute: t.exposeInt('operatorRateLimitPerMinute'),
    approval_ttl_seconds: t.exposeInt('approvalTtlSeconds', {
      description: 'How long a human approval stays open (and an approved one usable) after the agent asked.',
    }),
    record_params: t.exposeBoolean('recordParams', {
      description: 'Whether interaction records keep the action params; their SHA-256 is always kept.',
    }),
    admin_user: t.field({
      type: UserRef,
      description:
        'The longest-standing admin: the user who signed the organization up, unless they were demoted or removed (an organization always keeps an admin).',
      select: { users: { where: { role: 'admin' }, orderBy: [{ createdAt: 'asc' }, { id: 'asc' }], take: 1 } },
      resolve: (org) => org.users[0],
    }),
    created_at: t.expose('createdAt', { type: 'Timestamp' }),
  }),
});

const organizationQuery = query('organization', {
  field: (t) =>
    t.prismaField({
      type: 'Organization',
      args: { org_id: t.arg.id({ required: true }) },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'org:read' } }),
      resolve: (query, _, args, ctx) => ctx.services.orgs.get(String(args.org_id), query),
    }),
  rest: {
    method: 'GET',
    path: '/orgs/:org_id',
    tag: 'Organizations',
    summary: 'Read an organization',
    auth: ['bearer'],
    // Its settings and its longest-standing admin: nothing else, and no clock.
    answerCache: { tables: ['organizations', 'users'] },
  },
});

const createOrganizationMutation = mutation('create_organization', {
  field: (t) =>
    t.prismaField({
      type: 'Organization',
      description:
        'Sign-up: creates the organization and its first user, an admin. Throttled per client address ' +
        '(SIGNUP_MAX_PER_ADDRESS an hour; 429 POLICY_VIOLATION with Retry-After). Refused with 403 FORBIDDEN ' +
        'while the deployment has closed sign-up (SIGNUP=closed; the `signup` query tells).',
      args: {
        name: t.arg.string({ required: true }),
        slug: t.arg.string({ required: true }),
        admin_email: t.arg.string({ required: true }),
        admin_password: t.arg.string({ required: true }),
      },
      resolve: (query, _, args, ctx) => ctx.services.orgs.signUp(args, ctx.state.clientAddress, query),
    }),
  rest: {
    // 403: sign-up is closed (SIGNUP=closed); 409: the slug or the email is taken; 429: too many
    // sign-ups from the client's address.
    extraErrors: ['403', '409', '429'],
    errorNotes: { '403': 'FORBIDDEN: sign-up is closed on this deployment (SIGNUP=closed)' },
    method: 'POST',
    path: '/orgs',
    status: 201,
    tag: 'Organizations',
    summary: 'Sign up: create an organization and its admin user',
    auth: [],
  },
});

const SignUpStatusRef = builder.objectRef<{ open: boolean }>('SignUpStatus').implement({
  description: 'Whether this deployment takes sign-ups, so a client offers sign-up only where it can work.',
  fields: (t) => ({
    open: t.exposeBoolean('open', {
      description:
        'true: anyone may create an organization (create_organization, POST /api/v1/orgs); false: SIGNUP=closed, ' +
        'organizations come from `agent-gateway create-org` only.',
    }),
  }),
});

// Open, like sign-up itself: it tells nothing a sign-up attempt would not.
const signupQuery = query('signup', {
  field: (t) =>
    t.field({
      type: SignUpStatusRef,
      description: 'Whether sign-up is open on this deployment (the console offers it only then).',
      resolve: (_, __, ctx) => ctx.services.orgs.signUpStatus(),
    }),
  rest: {
    method: 'GET',
    path: '/signup',
    tag: 'Organizations',
    summary: 'Whether sign-up is open on this deployment',
    auth: [],
  },
});

const updateOrganizationMutation = mutation('update_organization', {
  field: (t) =>
    t.prismaField({
      type: 'Organization',
      description: 'Change settings (admins only).',
      args: {
        org_id: t.arg.id({ required: true }),
        name: t.arg.string(),
        operator_rate_limit_per_minute: t.arg.int(),
        approval_ttl_seconds: t.arg.int({ description: '60 to 2592000 (30 days); default 86400.' }),
        record_params: t.arg.boolean({ description: 'Keep action params in records (default true).' }),
      },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'org:update' } }),
      resolve: (query, _, args, ctx) => ctx.services.orgs.update(String(args.org_id), args, principalOf(ctx), query),
    }),
  rest: {
    method: 'PATCH',
    path: '/orgs/:org_id',
    tag: 'Organizations',
    summary: 'Change organization settings',
    auth: ['bearer'],
  },
});

/** The operations of this file, in the order the OpenAPI document lists their routes. */
export const orgOperations = [organizationQuery, createOrganizationMutation, signupQuery, updateOrganizationMutation];
