import { builder } from '../../api/builder.js';
import { principalOf } from '../../api/context.js';
import { listType } from '../../api/list.js';
import { mutation, query } from '../../api/operations.js';
import { userRoles } from '../../authz/authz.js';

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

const usersQuery = query('users', {
  field: (t) =>
    t.field({
      type: UserList,
      description: 'Users of the organization (admins only).',
      args: { org_id: t.arg.id({ required: true }) },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'user:read' } }),
      resolve: (_, args, ctx) => ctx.services.users.list(String(args.org_id)),
    }),
  rest: {
    method: 'GET',
    path: '/orgs/:org_id/users',
    tag: 'Organizations',
    summary: 'List the users of an organization',
    auth: ['bearer'],
    // The org's users, nothing else: the console's users page reads it again and again.
    answerCache: { tables: ['users'] },
  },
});

const createUserMutation = mutation('create_user', {
  field: (t) =>
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
  rest: {
    extraErrors: ['409'],
    method: 'POST',
    path: '/orgs/:org_id/users',
    status: 201,
    tag: 'Organizations',
    summary: 'Add a user to an organization',
    auth: ['bearer'],
  },
});

const updateUserRoleMutation = mutation('update_user_role', {
  field: (t) =>
    t.field({
      type: UserRef,
      description:
        "Gives a user another role (admins only). The organization's last admin cannot be demoted (409 CONFLICT). " +
        "The user's sessions carry the new role from their next request, on every process.",
      args: {
        org_id: t.arg.id({ required: true }),
        user_id: t.arg.id({ required: true }),
        role: t.arg({ type: UserRoleEnum, required: true }),
      },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'user:update' } }),
      resolve: (_, args, ctx) =>
        ctx.services.users.changeRole(String(args.org_id), String(args.user_id), args.role, principalOf(ctx)),
    }),
  rest: {
    extraErrors: ['409'],
    errorNotes: { '409': "CONFLICT: the user is the organization's last admin" },
    method: 'PATCH',
    path: '/orgs/:org_id/users/:user_id',
    tag: 'Organizations',
    summary: "Change a user's role",
    auth: ['bearer'],
  },
});

const removeUserMutation = mutation('remove_user', {
  field: (t) =>
    t.boolean({
      description:
        "Removes a user from the organization (admins only); the organization's last admin cannot be removed " +
        "(409 CONFLICT). The user's sessions and refresh tokens stop working at once, on every process; API keys " +
        "they created and OAuth grants they allowed stay the organization's.",
      args: { org_id: t.arg.id({ required: true }), user_id: t.arg.id({ required: true }) },
      authScopes: (_, args) => ({ org: { orgId: String(args.org_id), action: 'user:delete' } }),
      resolve: async (_, args, ctx) => {
        await ctx.services.users.remove(String(args.org_id), String(args.user_id), principalOf(ctx));
        return true;
      },
    }),
  rest: {
    extraErrors: ['409'],
    errorNotes: { '409': "CONFLICT: the user is the organization's last admin" },
    method: 'DELETE',
    path: '/orgs/:org_id/users/:user_id',
    status: 204,
    tag: 'Organizations',
    summary: 'Remove a user from an organization',
    auth: ['bearer'],
  },
});

/** The operations of this file, in the order the OpenAPI document lists their routes. */
export const userOperations = [usersQuery, createUserMutation, updateUserRoleMutation, removeUserMutation];
