import { builder } from '../../graphql/builder.js';
import { principalOf } from '../../graphql/context.js';
import { listType } from '../../graphql/list.js';
import { restRoute } from '../../http/rest-routes.js';
import { userRoles } from '../auth/authz.js';

export const UserRoleEnum = builder.enumType('UserRole', { values: userRoles });

export const UserRef = builder.prismaObject('User', {
  fields: (t) => ({
    user_id: t.exposeID('id'),
    email: t.exposeString('email'),
    org_id: t.exposeID('orgId'),
    role: t.expose('role', { type: UserRoleEnum }),
    created_at: t.expose('createdAt', { type: 'Timestamp' }),
  }),
});

const UserList = listType('UserList', UserRef);

builder.queryField('users', (t) =>
  t.field({
    type: UserList,
    description: 'Users of the organization (admins only).',
    args: { org_id: t.arg.id({ required: true }) },
    authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'user:read' } }),
    resolve: (_, args, ctx) => ctx.services.users.list(String(args.org_id)),
  }),
);
restRoute('Query.users', {
  method: 'GET',
  path: '/orgs/:org_id/users',
  tag: 'Organizations',
  summary: 'List the users of an organization',
  auth: ['bearer'],
});

builder.mutationField('create_user', (t) =>
  t.field({
    type: UserRef,
    description: 'Add a user with a role (admins only).',
    args: {
      org_id: t.arg.id({ required: true }),
      email: t.arg.string({ required: true }),
      password: t.arg.string({ required: true }),
      role: t.arg({ type: UserRoleEnum, required: true }),
    },
    authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'user:create' } }),
    resolve: (_, args, ctx) => ctx.services.users.create(String(args.org_id), args, principalOf(ctx)),
  }),
);
restRoute('Mutation.create_user', {
  extraErrors: ['409'],
  method: 'POST',
  path: '/orgs/:org_id/users',
  status: 201,
  tag: 'Organizations',
  summary: 'Add a user to an organization',
  auth: ['bearer'],
});
