import { builder } from '../../api/builder.js';
import { closedValues } from '../../api/closed-values.js';
import { principalOf } from '../../api/context.js';
import { AppError } from '../../errors.js';
import { mutation } from '../../api/operations.js';
import type { User } from '../../generated/prisma/client.js';
import { UserRef, UserRoleEnum } from '../user/user.graphql.js';
import type { IssuedSession, RotatedSession, SessionService } from './session.service.js';

const TokenFields = builder.objectRef<IssuedSession>('AccessToken').implement({
  fields: (t) => ({
    access_token: t.exposeString('access_token'),
    token_type: t.exposeString('token_type', { description: 'Always `bearer`.', ...closedValues(['bearer']) }),
    expires_in: t.exposeInt('expires_in', { description: 'Seconds until the token expires.' }),
  }),
});

type LoginResult = Awaited<ReturnType<SessionService['login']>>;

const refreshTokenDescription =
  'Opaque (`agr_…`), single use, valid 30 days: exchange it for a new access token and a new refresh token. ' +
  'Presenting one that was already used revokes every token of its session.';

const LoginSession = builder.objectRef<LoginResult>('LoginSession').implement({
  fields: (t) => ({
    access_token: t.exposeString('access_token'),
    token_type: t.exposeString('token_type', closedValues(['bearer'])),
    expires_in: t.exposeInt('expires_in'),
    refresh_token: t.exposeString('refresh_token', { description: refreshTokenDescription }),
    user: t.field({ type: UserRef, resolve: (session) => session.user }),
  }),
});

type SignedInUserRow = Pick<User, 'id' | 'email' | 'orgId' | 'role'>;

/** The user of a session as the unprefixed `/auth/login` shows it: exactly these four fields. */
const SignedInUser = builder.objectRef<SignedInUserRow>('SignedInUser').implement({
  fields: (t) => ({
    user_id: t.exposeID('id'),
    email: t.exposeString('email'),
    org_id: t.exposeID('orgId'),
    role: t.expose('role', { type: UserRoleEnum }),
  }),
});

/** `session_login`: the login of docs/decisions/0012-rotating-refresh-tokens.md, named as the unprefixed `/auth/login` answers it. */
export interface SessionLoginResult extends RotatedSession {
  user: SignedInUserRow;
}

export const SessionLogin = builder.objectRef<SessionLoginResult>('SessionLogin').implement({
  fields: (t) => ({
    token: t.exposeString('token', { description: 'The bearer access token, the same as `/api/v1/auth/login` gives.' }),
    refresh_token: t.exposeString('refresh_token', { description: refreshTokenDescription }),
    expires: t.expose('expires', { type: 'Timestamp', description: 'When the access token expires.' }),
    user: t.field({ type: SignedInUser, resolve: (session) => session.user }),
  }),
});

const RefreshedSession = builder.objectRef<RotatedSession>('RefreshedSession').implement({
  fields: (t) => ({
    token: t.exposeString('token', { description: 'A new bearer access token of the same session.' }),
    refresh_token: t.exposeString('refresh_token', {
      description: `Replaces the presented one. ${refreshTokenDescription}`,
    }),
    expires: t.expose('expires', { type: 'Timestamp', description: 'When the access token expires.' }),
  }),
});

const loginMutation = mutation('login', {
  field: (t) =>
    t.field({
      type: LoginSession,
      args: { email: t.arg.string({ required: true }), password: t.arg.string({ required: true }) },
      resolve: (_, args, ctx) => ctx.services.sessions.login(args.email, args.password, ctx.state.clientAddress),
    }),
  rest: {
    method: 'POST',
    path: '/auth/login',
    tag: 'Sessions',
    summary: 'Exchange email and password for a bearer token (valid 3600 s) and a refresh token (30 days, single use)',
    auth: [],
    // 403: the org signs in with single sign-on (a non-admin with the right password).
    extraErrors: ['401', '403', '429'],
  },
});

const sessionLoginMutation = mutation('session_login', {
  field: (t) =>
    t.field({
      type: SessionLogin,
      description:
        'Exchange email and password for an access token, a refresh token and the user (login throttling applies).',
      args: { email: t.arg.string({ required: true }), password: t.arg.string({ required: true }) },
      resolve: async (_, args, ctx) => {
        const session = await ctx.services.sessions.login(args.email, args.password, ctx.state.clientAddress);
        return {
          token: session.access_token,
          refresh_token: session.refresh_token,
          expires: session.expires,
          user: session.user,
        };
      },
    }),
  rest: {
    method: 'POST',
    path: '/auth/login',
    mount: 'root',
    tag: 'Sessions',
    summary: 'Log in: an access token, a refresh token (30 days, single use) and the user',
    auth: [],
    extraErrors: ['401', '403', '429'],
  },
});

// No credentials: the refresh token is the credential.
const refreshSessionMutation = mutation('refresh_session', {
  field: (t) =>
    t.field({
      type: RefreshedSession,
      description:
        'Exchange a refresh token for a new access token and a new refresh token of the same session. Each refresh token ' +
        'works once; presenting a used one revokes the whole session (401 INVALID_TOKEN). Failed attempts are throttled per ' +
        'client address (429 POLICY_VIOLATION with Retry-After).',
      args: { refresh_token: t.arg.string({ required: true }) },
      resolve: (_, args, ctx) => ctx.services.sessions.rotate(args.refresh_token, ctx.state.clientAddress),
    }),
  rest: {
    method: 'POST',
    path: '/auth/refresh',
    mount: 'root',
    tag: 'Sessions',
    summary: 'Rotate a refresh token: a new access token and a new refresh token; a reused one revokes the session',
    auth: [],
    // 429: too many failed refreshes from the client's address.
    extraErrors: ['401', '429'],
  },
});

const refreshMutation = mutation('refresh', {
  field: (t) =>
    t.field({
      type: TokenFields,
      description: 'A new token for the caller, in the same session; the presented token stops working.',
      authScopes: { session: true },
      resolve: (_, __, ctx) => {
        const principal = principalOf(ctx);
        if (principal.type !== 'user') throw new AppError('FORBIDDEN', 'Only a bearer token can be refreshed');
        return ctx.services.sessions.refresh(principal);
      },
    }),
  rest: {
    method: 'POST',
    path: '/auth/refresh',
    tag: 'Sessions',
    summary: 'Exchange a still-valid bearer token for a new one',
    auth: ['bearer'],
  },
});

const logoutMutation = mutation('logout', {
  field: (t) =>
    t.boolean({
      description:
        'Revokes the presented bearer token and its whole session: every refresh and access token of that login.',
      authScopes: { session: true },
      resolve: async (_, __, ctx) => {
        const principal = principalOf(ctx);
        if (principal.type !== 'user') throw new AppError('FORBIDDEN', 'Only a bearer token can log out');
        await ctx.services.sessions.logout(principal);
        return true;
      },
    }),
  rest: {
    method: 'POST',
    path: '/auth/logout',
    status: 204,
    tag: 'Sessions',
    summary: 'Revoke the presented bearer token and every token of its session',
    auth: ['bearer'],
  },
});

/** The operations of this file, in the order the OpenAPI document lists their routes. */
export const authOperations = [
  loginMutation,
  sessionLoginMutation,
  refreshSessionMutation,
  refreshMutation,
  logoutMutation,
];
