/**
 * The consent page, /console/authorize: where `GET /oauth/authorize` sends the browser of a
 * person connecting an MCP client to an agent (docs/decisions/0047-mcp-oauth.md#consent-page).
 *
 * The page passes the request's parameters on as they are in its address; the service checks
 * them again when the page reads what to show and again when it sends the answer, so nothing the
 * address carries is trusted here. The answer is a GraphQL mutation sent with the tab's bearer
 * token (no cookie), so another site can neither answer for the operator nor frame this page
 * (the console is served with `frame-ancestors 'none'`). It loads once: a request does not change
 * while it is looked at, and polling would only cost requests.
 */
import { useEffect, useId, useState } from 'preact/hooks';
import {
  DecideOAuthAuthorizationDocument,
  OAuthAuthorizationRequestDocument,
  type OAuthAuthorizationRequestQuery,
  type OAuthAuthorizationRequestQueryVariables,
} from '../generated/graphql';
import { ApiError, request } from './api';
import { ErrorLine, messageOf, Status } from './ui';

type View = OAuthAuthorizationRequestQuery['oauth_authorization_request'];
type Params = Required<{ [K in keyof OAuthAuthorizationRequestQueryVariables]: string | null }>;

/** The parameters of an authorization request (src/modules/oauth/authorization-request.ts). */
const PARAM_NAMES = [
  'response_type',
  'client_id',
  'redirect_uri',
  'code_challenge',
  'code_challenge_method',
  'state',
  'resource',
  'scope',
] as const satisfies readonly (keyof Params)[];

/** What a scope lets the client do, in words; the one scope there is today. */
const SCOPE_MEANINGS: Record<string, string> = {
  'mcp:tools': 'Call this agent’s tools through Agent Gateway; every call is still decided by policy and recorded.',
};

/**
 * The request's parameters from the page's address, or why they cannot be passed on: a
 * parameter given twice is refused, as /oauth/authorize refuses it, rather than picking one.
 */
function paramsOfLocation(): { params: Params } | { problem: string } {
  const query = new URLSearchParams(location.search);
  const repeated = PARAM_NAMES.find((name) => query.getAll(name).length > 1);
  if (repeated)
    return { problem: `This authorization request cannot be answered: the parameter ${repeated} is repeated.` };
  return { params: Object.fromEntries(PARAM_NAMES.map((name) => [name, query.get(name)])) as Params };
}

/**
 * Sends the browser to the client with the answer. The address comes from the service, built on
 * the redirect URI it checked; the page still goes nowhere but the http(s) host it showed.
 */
function goToClient(redirectTo: string, shownHost: string) {
  const target = new URL(redirectTo);
  if ((target.protocol !== 'https:' && target.protocol !== 'http:') || target.host !== shownHost) {
    throw new ApiError(`The service answered with an address other than ${shownHost}; the browser stays here.`);
  }
  location.assign(target.href);
}

export function ConsentPage() {
  const [parsed] = useState(paramsOfLocation);
  const [view, setView] = useState<View | undefined>(undefined);
  const [loadError, setLoadError] = useState<string | undefined>('problem' in parsed ? parsed.problem : undefined);
  const [busy, setBusy] = useState(false);
  const [leaving, setLeaving] = useState<'allow' | 'deny' | undefined>(undefined);
  const [answerError, setAnswerError] = useState<string | undefined>(undefined);
  const refusalId = useId();

  useEffect(() => {
    document.title = 'Connect a client? · Agent Gateway console';
    document.getElementById('page-title')?.focus();
    if (!('params' in parsed)) return;
    request(OAuthAuthorizationRequestDocument, parsed.params).then(
      (result) => setView(result.oauth_authorization_request),
      (failure) => setLoadError(messageOf(failure)),
    );
  }, []);

  const answer = async (allow: boolean) => {
    if (!view || !('params' in parsed)) return;
    setBusy(true);
    setAnswerError(undefined);
    let redirectTo: string;
    try {
      redirectTo = (await request(DecideOAuthAuthorizationDocument, { ...parsed.params, allow }))
        .decide_oauth_authorization.redirect_to;
    } catch (failure) {
      setAnswerError(messageOf(failure));
      setBusy(false);
      return;
    }
    // Answered: from here the buttons stay disabled, whether the browser leaves or not, since a
    // second Allow would make a second grant.
    try {
      goToClient(redirectTo, view.client.redirect_host);
      setLeaving(allow ? 'allow' : 'deny');
    } catch (failure) {
      setAnswerError(messageOf(failure));
    }
  };

  return (
    <section class="page consent" aria-labelledby="page-title">
      <h1 id="page-title" tabIndex={-1}>
        Connect an MCP client to an agent?
      </h1>
      {!view && !loadError && <p class="muted">Loading the request…</p>}
      {loadError && (
        <>
          <ErrorLine message={loadError} />
          <p>Nothing was sent to the client. Start the connection again from the client, or close this tab.</p>
        </>
      )}
      {view && (
        <>
          <p class="redirect-host">
            After your answer, the browser goes to <strong class="host">{view.client.redirect_host}</strong>. Allow only
            if you recognise it as the application you are connecting.
          </p>
          <div class="consent-parts">
            <ClientFacts client={view.client} />
            <AgentFacts view={view} />
            <article class="card" aria-labelledby="consent-scope">
              <h2 id="consent-scope">Access asked for</h2>
              <dl class="facts">
                <dt>Scope</dt>
                <dd>
                  <code>{view.scope}</code>
                </dd>
              </dl>
              <p class="scope-meaning">{SCOPE_MEANINGS[view.scope] ?? 'A scope this console does not describe.'}</p>
              <p class="muted">Until it is revoked on the Agents page, under the agent’s connected clients.</p>
            </article>
          </div>
          <div class="buttons consent-buttons">
            <button
              type="button"
              class={view.can_allow ? 'primary' : 'primary refused'}
              disabled={!view.can_allow || busy}
              aria-describedby={view.refusal ? refusalId : undefined}
              onClick={() => void answer(true)}
            >
              Allow
            </button>
            <button type="button" disabled={busy} onClick={() => void answer(false)}>
              Deny
            </button>
          </div>
          {view.refusal && (
            <p id={refusalId} class="refusal">
              {view.refusal}
            </p>
          )}
          <ErrorLine message={answerError} />
          {leaving && (
            <p role="status">
              {leaving === 'allow' ? 'Allowed' : 'Denied'}; going to {view.client.redirect_host}…
            </p>
          )}
        </>
      )}
    </section>
  );
}

function ClientFacts({ client }: { client: View['client'] }) {
  return (
    <article class="card" aria-labelledby="consent-client">
      <h2 id="consent-client">The client</h2>
      <dl class="facts">
        <dt>Name</dt>
        <dd>
          {client.name ?? <span class="muted">unnamed client</span>}{' '}
          <span class="muted">(as the client calls itself)</span>
        </dd>
        <dt>Client id</dt>
        <dd>
          <code>{client.client_id}</code>
        </dd>
        <dt>Known as</dt>
        <dd>
          {client.kind === 'metadata_document'
            ? 'a metadata document: its client id is the address of its own description'
            : 'a client registered with this gateway'}
        </dd>
        <dt>Redirect host</dt>
        <dd>
          <strong class="host">{client.redirect_host}</strong>
        </dd>
        <dt>Redirect URI</dt>
        <dd>
          <code>{client.redirect_uri}</code>
        </dd>
        {client.client_uri && (
          <>
            <dt>Website</dt>
            {/* Text, not a link: the client states it, nothing checked it. */}
            <dd>
              <code>{client.client_uri}</code>
            </dd>
          </>
        )}
      </dl>
    </article>
  );
}

function AgentFacts({ view }: { view: View }) {
  const { agent } = view;
  return (
    <article class="card" aria-labelledby="consent-agent">
      <h2 id="consent-agent">The agent</h2>
      {!agent && (
        <p class="error">
          Your organization has no agent <code>{view.agent_id}</code>.
        </p>
      )}
      <dl class="facts">
        {agent && (
          <>
            <dt>Name</dt>
            <dd>{agent.name}</dd>
            <dt>Id</dt>
            <dd>
              <code>{agent.agent_id}</code>
            </dd>
            <dt>Status</dt>
            <dd>
              <Status value={agent.status} />
            </dd>
          </>
        )}
        <dt>Endpoint</dt>
        <dd>
          <code>{view.resource}</code>
        </dd>
      </dl>
    </article>
  );
}
