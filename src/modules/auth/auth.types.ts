import { builder } from '../../graphql/builder.js';
import { principalOf } from '../../graphql/context.js';
import { AppError } from '../../errors.js';
import { restRoute } from '../../http/rest-routes.js';
import { UserRef } from '../user/user.types.js';
import type { IssuedSession } from './session.service.js';

const TokenFields = builder.objectRef<IssuedSession>('AccessToken').implement({
  fields: (t) => ({
    access_token: t.exposeString('access_token'),
    token_type: t.exposeString('token_type', { description: 'Always `bearer`.' }),
    expires_in: t.exposeInt('expires_in', { description: 'Seconds until the token expires.' }),
  }),
});

type LoginResult = Awaited<ReturnType<import('./session.service.js').SessionService['login']>>;

const LoginSession = builder.objectRef<LoginResult>('LoginSession').implement({
  fields: (t) => ({
    access_token: t.exposeString('access_token'),
    token_type: t.exposeString('token_type'),
    expires_in: t.exposeInt('expires_in'),
    user: t.field({ type: UserRef, resolve: (session) => session.user }),
  }),
});

builder.mutationField('login', (t) =>
  t.field({
    type: LoginSession,
    args: { email: t.arg.string({ required: true }), password: t.arg.string({ required: true }) },
    resolve: (_, args, ctx) => ctx.services.sessions.login(args.email, args.password, ctx.state.clientAddress),
  }),
);
restRoute('Mutation.login', {
  method: 'POST',
  path: '/auth/login',
  tag: 'Sessions',
  summary: 'Exchange email and password for a bearer token (valid 3600 s)',
  auth: [],
  extraErrors: ['401', '429'],
});

builder.mutationField('refresh', (t) =>
  t.field({
    type: TokenFields,
    description: 'A new token for the caller; the presented token stops working.',
    authScopes: { session: true },
    resolve: (_, __, ctx) => {
      const principal = principalOf(ctx);
      if (principal.type !== 'user') throw new AppError('FORBIDDEN', 'Only a bearer token can be refreshed');
      return ctx.services.sessions.refresh(principal);
    },
  }),
);
restRoute('Mutation.refresh', {
  method: 'POST',
  path: '/auth/refresh',
  tag: 'Sessions',
  summary: 'Exchange a still-valid bearer token for a new one',
  auth: ['bearer'],
});

builder.mutationField('logout', (t) =>
  t.boolean({
    description: 'Revokes the presented bearer token.',
    authScopes: { session: true },
    resolve: async (_, __, ctx) => {
      const principal = principalOf(ctx);
      if (principal.type !== 'user') throw new AppError('FORBIDDEN', 'Only a bearer token can log out');
      await ctx.services.sessions.revoke(principal);
      return true;
    },
  }),
);
restRoute('Mutation.logout', {
  method: 'POST',
  path: '/auth/logout',
  status: 204,
  tag: 'Sessions',
  summary: 'Revoke the presented bearer token',
  auth: ['bearer'],
});
