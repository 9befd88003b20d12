/**
 * A tool's OAuth connections (docs/decisions/0068-upstream-connections.md): the organization's
 * account, or each user's own, that the gateway calls the tool's upstream with. Connect asks the
 * API for an authorization and sends the browser to it (the gateway's start page, then the
 * upstream's authorization server); the server sends the browser back here, to
 * `/console/tools/<tool_id>?connection=…&result=connected|error&reason=…`, which says how it went.
 */
import { useState } from 'preact/hooks';
import {
  ConnectToolDocument,
  RevokeToolConnectionDocument,
  ToolConnectionsDocument,
  type ToolConnectionsQuery,
} from '../generated/graphql';
import { request, type SignedInUser } from './api';
import { ConfirmButton, ErrorLine, Status, Time, useAction, usePolled } from './ui';

type Connection = ToolConnectionsQuery['tool_connections']['items'][number];

/** `/console/tools/<tool_id>`: the tool the address names, if any. */
export function toolIdFromLocation(): string | undefined {
  const match = /^\/console\/tools\/([^/]+)\/?$/.exec(location.pathname);
  return match ? decodeURIComponent(match[1]) : undefined;
}

/** Why a connection did not complete, by the reason the callback names. */
const REASONS: Record<string, string> = {
  unknown_state: 'this authorization is unknown or was already used.',
  invalid_request: 'the authorization server sent back an answer without its state.',
  expired: 'it took longer than 10 minutes.',
  browser_mismatch: 'it came back to another browser than the one that started it.',
  tool_changed: 'the tool no longer connects with OAuth.',
  forbidden: 'the user who started it may no longer connect this tool.',
  client_changed: 'the tool’s OAuth client changed meanwhile.',
  connection_removed: 'the connection was removed meanwhile.',
  authorization_error: 'the authorization server refused it (the account may have declined).',
  issuer_mismatch: 'the answer came from another authorization server than the one asked.',
  state_mismatch: 'the answer does not belong to this authorization.',
  invalid_grant: 'the authorization server refused the code.',
};

/**
 * What the callback said, read once from the address (then dropped from it, so a reload does not
 * say it again).
 */
export function ConnectionOutcome() {
  const [outcome] = useState(() => {
    const query = new URLSearchParams(location.search);
    const result = query.get('result');
    if (result) history.replaceState(null, '', location.pathname);
    return { result, reason: query.get('reason') ?? '' };
  });
  if (outcome.result === 'connected')
    return (
      <p class="notice" role="status">
        Connected: the gateway now calls this tool’s upstream with the account you signed in with.
      </p>
    );
  if (outcome.result === 'error')
    return (
      <p class="error" role="alert">
        Not connected: {REASONS[outcome.reason] ?? `the connection failed (${outcome.reason || 'no reason given'}).`}{' '}
        Connect again to retry.
      </p>
    );
  return null;
}

/**
 * The tool's connections this user may see, Connect, and Disconnect for each. `scope`: whose
 * account the tool uses (`config.auth.connection`); a per-user tool asks each user to connect
 * their own.
 */
export function ToolConnections({
  orgId,
  toolId,
  user,
  scope,
}: {
  orgId: string;
  toolId: string;
  user: SignedInUser;
  scope: 'org' | 'user';
}) {
  const connections = usePolled(() => request(ToolConnectionsDocument, { org_id: orgId, tool_id: toolId }), toolId);
  const action = useAction(connections.reload);
  const connect = () =>
    action.run(async () => {
      const started = await request(ConnectToolDocument, { org_id: orgId, tool_id: toolId });
      // A navigation: the gateway's start page binds the authorization to this browser, then redirects.
      location.assign(started.connect_tool.authorization_url);
    });
  const items = connections.data?.tool_connections.items ?? [];
  return (
    <section class="connections" aria-label="OAuth connections">
      <h3>OAuth connections</h3>
      <ErrorLine message={connections.error} />
      {connections.data && items.length === 0 && <p class="muted">Not connected yet.</p>}
      <ul class="definitions">
        {items.map((connection) => (
          <li key={connection.connection_id}>
            <ConnectionItem
              connection={connection}
              own={connection.user_id === user.user_id}
              onRevoke={() =>
                request(RevokeToolConnectionDocument, {
                  org_id: orgId,
                  tool_id: toolId,
                  connection_id: connection.connection_id,
                })
              }
              after={connections.reload}
            />
          </li>
        ))}
      </ul>
      <div class="buttons">
        <button type="button" disabled={action.busy} onClick={() => void connect()}>
          {connectLabel(
            scope,
            items.some((c) => c.status === 'connected' && (scope === 'org' || c.user_id === user.user_id)),
          )}
        </button>
      </div>
      <ErrorLine message={action.error} />
    </section>
  );
}

const connectLabel = (scope: 'org' | 'user', connected: boolean) =>
  scope === 'user'
    ? connected
      ? 'Reconnect your account'
      : 'Connect your account'
    : connected
      ? 'Connect again'
      : 'Connect';

function ConnectionItem(props: {
  connection: Connection;
  own: boolean;
  onRevoke: () => Promise<unknown>;
  after: () => Promise<void>;
}) {
  const { connection } = props;
  const action = useAction(props.after);
  const whose = connection.scope === 'org' ? 'The organization' : props.own ? 'You' : `User ${connection.user_id}`;
  return (
    <div class="definition" role="group" aria-label={`Connection ${connection.connection_id}`}>
      <p class="definition-name">
        {whose} <Status value={connection.status} />
      </p>
      <dl class="facts">
        {connection.subject && (
          <>
            <dt>Upstream account</dt>
            <dd>
              <code class="upstream-text">{connection.subject}</code>
            </dd>
          </>
        )}
        {connection.scopes.length > 0 && (
          <>
            <dt>Scopes</dt>
            <dd>
              <code>{connection.scopes.join(' ')}</code>
            </dd>
          </>
        )}
        <dt>Connected</dt>
        <dd>{connection.connected_at ? <Time value={connection.connected_at} /> : 'not yet'}</dd>
        <dt>Last used</dt>
        <dd>{connection.last_used_at ? <Time value={connection.last_used_at} /> : 'never'}</dd>
      </dl>
      {connection.error && (
        <p class="error">
          <span class="upstream-text">{connection.error}</span>
        </p>
      )}
      {connection.status !== 'revoked' && (
        <div class="buttons">
          <ConfirmButton
            label="Disconnect"
            confirmLabel="Yes, disconnect"
            question="Disconnect this account?"
            tone="danger"
            busy={action.busy}
            onConfirm={() => action.run(props.onRevoke)}
          >
            The gateway forgets its tokens and revokes them at the upstream’s authorization server; calls that need it
            are refused until it is connected again.
          </ConfirmButton>
        </div>
      )}
      <ErrorLine message={action.error} />
    </div>
  );
}
