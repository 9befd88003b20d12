import type { Deps } from '../../deps.js';
import { AppError, forbidden } from '../../errors.js';
import { randomId } from '../../lib/ids.js';
import { actorOf } from '../audit/audit-events.js';
import { recordAudit } from '../audit/audit.service.js';
import { bumpConfigVersion } from '../../lib/config-cache.js';
import { may, type UserPrincipal } from '../../authz/authz.js';
import {
  authorizationRedirect,
  checkAuthorizationRequest,
  errorRedirect,
  type AuthorizationCheck,
  type AuthorizationParams,
  type AuthorizationRequest,
} from './authorization-request.js';
import { snapshotOfGrant } from './grants.js';
import type { KnownClient } from './oauth-client.js';
import { CODE_PREFIX, CODE_TTL_SECONDS, newSecret } from './oauth-tokens.js';
import { insertGrantWithCode, orgKnowsClient } from './oauth.store.js';

/**
 * The authorization endpoint and the consent it asks for (docs/decisions/0047-mcp-oauth.md).
 * `GET /oauth/authorize` checks the request and sends the browser to the console's consent page
 * with the same parameters; the page, signed in, reads what it shows (`describe`) and sends the
 * operator's answer (`decide`), and both check the request again: nothing the browser carries
 * between them is trusted.
 */

/** What an agent looks like on the consent page. */
export interface ConsentAgent {
  agent_id: string;
  name: string;
  status: string;
}

/** What the consent page shows, and whether this operator may allow. */
export interface ConsentView {
  client: {
    client_id: string;
    name: string | null;
    /** How the gateway knows the client: `registered` here, or `metadata_document` at its client_id URL. */
    kind: KnownClient['kind'];
    client_uri: string | null;
    redirect_uri: string;
    /** Where the browser goes after the answer: the thing an operator must recognise. */
    redirect_host: string;
  };
  /** The agent the resource names, in the operator's org; null when the org has none by that id. */
  agent: ConsentAgent | null;
  agent_id: string;
  resource: string;
  scope: string;
  can_allow: boolean;
  /** Why this operator cannot allow, when they cannot. */
  refusal: string | null;
}

/** Where the operator's answer sends the browser. */
export interface ConsentAnswer {
  redirect_to: string;
}

interface Collaborators {
  resolveClient(clientId: string, clientAddress: string): Promise<{ client: KnownClient } | { unknown: string }>;
  touchClient(clientId: string): Promise<void>;
  /** The agent of the org by that id, or null. */
  findAgent(orgId: string, svcId: string): Promise<ConsentAgent | null>;
}

/** Where `/oauth/authorize` sends the browser: to the consent page, to the client with an error, or nowhere (a page saying why). */
export type AuthorizeOutcome = { consent: string } | { redirect: string } | { shown: string };

const hostOf = (uri: string) => new URL(uri).host;

export function createConsent(
  { env, db }: Pick<Deps, 'env' | 'db'>,
  { resolveClient, touchClient, findAgent }: Collaborators,
) {
  /** The request checked against its client; the client too, when it is known. */
  async function check(
    params: AuthorizationParams,
    clientAddress: string,
  ): Promise<{ check: AuthorizationCheck; client?: KnownClient }> {
    if (!params.client_id)
      return { check: checkAuthorizationRequest(params, { unknown: 'no client_id' }, env.publicUrl) };
    const resolved = await resolveClient(params.client_id, clientAddress);
    if ('unknown' in resolved) return { check: checkAuthorizationRequest(params, resolved, env.publicUrl) };
    return {
      check: checkAuthorizationRequest(params, resolved.client.registration, env.publicUrl),
      client: resolved.client,
    };
  }

  /** The consent page's request, accepted, or the error that refuses it (nothing is redirected from here). */
  async function accepted(
    params: AuthorizationParams,
    clientAddress: string,
  ): Promise<{ request: AuthorizationRequest; client: KnownClient }> {
    const { check: result, client } = await check(params, clientAddress);
    if (result.ok) return { request: result.request, client: client! };
    const why = 'shown' in result ? result.shown : result.redirected.description;
    throw new AppError('BAD_REQUEST', `This authorization request cannot be answered: ${why}`);
  }

  /** Why `user` cannot allow the request for `agent`, or null when they can. */
  function refusalOf(user: UserPrincipal, agent: ConsentAgent | null, svcId: string): string | null {
    if (!may(user, 'oauth_grant:create'))
      return 'Only an admin or an operator can allow a client; a viewer can only deny.';
    if (!agent) return `Your organization has no agent "${svcId}".`;
    if (agent.status !== 'active') return `The agent "${svcId}" is ${agent.status}; reactivate it first.`;
    return null;
  }

  return {
    /** `GET /oauth/authorize`: where the browser goes next. */
    async authorize(
      params: AuthorizationParams,
      consentPath: string,
      clientAddress: string,
    ): Promise<AuthorizeOutcome> {
      const { check: result } = await check(params, clientAddress);
      if (result.ok) {
        const query = new URLSearchParams(
          Object.entries(params).filter((entry): entry is [string, string] => entry[1] !== undefined),
        );
        return { consent: `${consentPath}?${query}` };
      }
      if ('shown' in result) return { shown: result.shown };
      return { redirect: errorRedirect(result.redirected, env.publicUrl) };
    },

    /** What the consent page shows the signed-in operator. */
    async describe(params: AuthorizationParams, user: UserPrincipal, clientAddress: string): Promise<ConsentView> {
      const { request, client } = await accepted(params, clientAddress);
      const agent = await findAgent(user.orgId, request.svcId);
      const refusal = refusalOf(user, agent, request.svcId);
      return {
        client: {
          client_id: client.client_id,
          name: client.registration.client_name ?? null,
          kind: client.kind,
          client_uri: client.registration.client_uri ?? null,
          redirect_uri: request.redirectUri,
          redirect_host: hostOf(request.redirectUri),
        },
        agent,
        agent_id: request.svcId,
        resource: request.resource,
        scope: request.scope,
        can_allow: refusal === null,
        refusal,
      };
    },

    /**
     * The operator's answer. Deny sends the client `access_denied`. Allow makes the grant and its
     * single-use code (audited: `oauth.grant_created`, and `oauth.client_registered` when the org
     * allows this client for the first time) and sends the client the code.
     */
    async decide(
      params: AuthorizationParams,
      user: UserPrincipal,
      allow: boolean,
      clientAddress: string,
    ): Promise<ConsentAnswer> {
      const { request, client } = await accepted(params, clientAddress);
      if (!allow) {
        const denied = {
          redirectUri: request.redirectUri,
          state: request.state,
          error: 'access_denied' as const,
          description: 'The operator denied access',
        };
        return { redirect_to: errorRedirect(denied, env.publicUrl) };
      }
      const agent = await findAgent(user.orgId, request.svcId);
      const refusal = refusalOf(user, agent, request.svcId);
      if (refusal) throw forbidden(refusal);
      const code = newSecret(CODE_PREFIX);
      const actor = actorOf(user);
      const clientName = client.registration.client_name ?? null;
      await db.prisma.$transaction(async (tx) => {
        if (!(await orgKnowsClient(tx, user.orgId, client.client_id))) {
          await recordAudit(tx, user.orgId, actor, {
            action: 'oauth.client_registered',
            targetType: 'oauth_client',
            targetId: client.client_id,
            after: { client_name: clientName, kind: client.kind, redirect_uris: client.registration.redirect_uris },
          });
          await bumpConfigVersion(tx);
        }
        const grant = await insertGrantWithCode(
          tx,
          {
            id: randomId('ogr', 16),
            orgId: user.orgId,
            svcId: request.svcId,
            clientId: client.client_id,
            clientName,
            redirectUri: request.redirectUri,
            scope: request.scope,
            approvedBy: user.email,
            approvedByUserId: user.userId,
          },
          { hash: code.hash, challenge: request.codeChallenge, ttlSeconds: CODE_TTL_SECONDS },
        );
        await recordAudit(tx, user.orgId, actor, {
          action: 'oauth.grant_created',
          targetType: 'oauth_grant',
          targetId: grant.id,
          after: snapshotOfGrant({
            id: grant.id,
            svc_id: grant.svcId,
            client_id: grant.clientId,
            client_name: grant.clientName,
            redirect_uri: grant.redirectUri,
            scope: grant.scope,
            approved_by: grant.approvedBy,
          }),
        });
        await bumpConfigVersion(tx);
      });
      if (client.kind === 'registered') await touchClient(client.client_id);
      return {
        redirect_to: authorizationRedirect(
          request.redirectUri,
          { code: code.token, state: request.state },
          env.publicUrl,
        ),
      };
    },
  };
}
