/**
 * Agents: status, current manifest, usage against the manifest's budgets; deactivate and
 * reactivate; the MCP clients connected with OAuth, and revoking them.
 */
import { useId, useState } from 'preact/hooks';
import {
  AgentGrantsDocument,
  AgentsDocument,
  DeactivateAgentDocument,
  ReactivateAgentDocument,
  RevokeAgentGrantDocument,
  type AgentGrantsQuery,
  type AgentStatus,
  type AgentsQuery,
} from '../generated/graphql';
import { canDecide, request, type SignedInUser } from './api';
import {
  ConfirmButton,
  counted,
  ErrorLine,
  FilterField,
  Partial,
  Section,
  Status,
  Time,
  useAction,
  usePolled,
} from './ui';

type Agent = AgentsQuery['agents']['items'][number];
type UsageWindow = Agent['usage']['hour'];
type Grant = AgentGrantsQuery['agent_grants']['items'][number];

export function AgentsPage({ user }: { user: SignedInUser }) {
  const [status, setStatus] = useState<AgentStatus | ''>('');
  const [query, setQuery] = useState('');
  const statusId = useId();
  const agents = usePolled(
    () => request(AgentsDocument, { status: status || null, q: query.trim() || null, limit: 100 }),
    `${status}\0${query.trim()}`,
  );
  const list = agents.data?.agents;
  return (
    <Section title="Agents" actions={<p class="count">{list ? counted(list.total, 'agent') : 'Loading…'}</p>}>
      <div class="filters">
        <span class="field">
          <label for={statusId}>Status</label>
          <select id={statusId} value={status} onChange={(e) => setStatus(e.currentTarget.value as AgentStatus | '')}>
            <option value="">all</option>
            <option value="active">active</option>
            <option value="deactivated">deactivated</option>
          </select>
        </span>
        <FilterField label="Id or name starts with" type="search" value={query} onChange={setQuery} />
      </div>
      <ErrorLine message={agents.error} />
      {list && <Partial shown={list.items.length} total={list.total} />}
      {list && list.items.length === 0 && <p class="empty">No agents.</p>}
      <ul class="cards">
        {list?.items.map((agent) => (
          <li key={agent.agent_id}>
            <AgentCard agent={agent} user={user} onChanged={agents.reload} />
          </li>
        ))}
      </ul>
    </Section>
  );
}

function Usage({ label, window }: { label: string; window: UsageWindow }) {
  return (
    <>
      <dt>{label}</dt>
      <dd>
        {window.limit != null ? (
          <>
            <meter
              min={0}
              max={window.limit}
              value={window.count}
              aria-label={`${label}: ${window.count} of ${window.limit}`}
            />{' '}
            {window.count} / {window.limit}
          </>
        ) : (
          <>{window.count} (no limit)</>
        )}{' '}
        <span class="muted">
          resets <Time value={window.resets_at} />
        </span>
      </dd>
    </>
  );
}

function AgentCard({ agent, user, onChanged }: { agent: Agent; user: SignedInUser; onChanged: () => Promise<void> }) {
  const [reason, setReason] = useState('');
  const reasonId = useId();
  const action = useAction(onChanged);
  const manifest = agent.current_manifest;
  return (
    <article class="card" aria-label={`Agent ${agent.agent_id}`} data-agent-id={agent.agent_id}>
      <header class="card-header">
        <h2>
          {agent.name} <code>{agent.agent_id}</code>
        </h2>
        <Status value={agent.status} />
      </header>
      <dl class="facts">
        <dt>Team</dt>
        <dd>{agent.team ?? '—'}</dd>
        <dt>Manifest</dt>
        <dd>
          {manifest ? (
            <>
              version {manifest.agent_version} <Status value={manifest.status} />
            </>
          ) : (
            'none yet'
          )}
        </dd>
        <Usage label="This hour" window={agent.usage.hour} />
        <Usage label="Today" window={agent.usage.day} />
        <dt>Last seen</dt>
        <dd>
          <Time value={agent.last_seen_at} />
        </dd>
        {agent.status === 'deactivated' && (
          <>
            <dt>Deactivated</dt>
            <dd>
              <Time value={agent.deactivated_at} /> by {agent.deactivated_by}
              {agent.deactivation_reason && <>: {agent.deactivation_reason}</>}
            </dd>
          </>
        )}
      </dl>
      {agent.status === 'active' && canDecide(user) && (
        <div class="decide">
          <label for={reasonId}>Reason for deactivating</label>
          <input
            id={reasonId}
            type="text"
            maxLength={1000}
            value={reason}
            onInput={(e) => setReason(e.currentTarget.value)}
          />
          <div class="buttons">
            <button
              type="button"
              class="danger"
              disabled={action.busy}
              onClick={() =>
                action.run(() =>
                  request(DeactivateAgentDocument, { agent_id: agent.agent_id, reason: reason.trim() || null }),
                )
              }
            >
              Deactivate
            </button>
          </div>
        </div>
      )}
      {/* Reactivating is an admin's decision (docs/reference/api-conventions.md#permissions). */}
      {agent.status === 'deactivated' && user.role === 'admin' && (
        <div class="buttons">
          <button
            type="button"
            class="primary"
            disabled={action.busy}
            onClick={() => action.run(() => request(ReactivateAgentDocument, { agent_id: agent.agent_id }))}
          >
            Reactivate
          </button>
        </div>
      )}
      <ErrorLine message={action.error} />
      <ConnectedClients agentId={agent.agent_id} user={user} />
    </article>
  );
}

/**
 * The agent's standing OAuth grants, loaded while open (and then polled like the list): one query
 * per card every 3 s for every agent on the page would cost more than the rest of the page.
 */
function ConnectedClients({ agentId, user }: { agentId: string; user: SignedInUser }) {
  const [open, setOpen] = useState(false);
  return (
    <details class="connected" onToggle={(e) => setOpen(e.currentTarget.open)}>
      <summary>Connected clients</summary>
      {open && <ClientList agentId={agentId} user={user} />}
    </details>
  );
}

function ClientList({ agentId, user }: { agentId: string; user: SignedInUser }) {
  const grants = usePolled(() => request(AgentGrantsDocument, { agent_id: agentId }), agentId);
  const list = grants.data?.agent_grants;
  return (
    <>
      <ErrorLine message={grants.error} />
      {!list && !grants.error && <p class="muted">Loading…</p>}
      {list && list.items.length === 0 && <p class="empty">No MCP client is connected with OAuth.</p>}
      {list && list.items.length > 0 && (
        <ul class="clients">
          {list.items.map((grant) => (
            <li key={grant.grant_id} data-grant-id={grant.grant_id}>
              <ClientGrant grant={grant} agentId={agentId} user={user} onRevoked={grants.reload} />
            </li>
          ))}
        </ul>
      )}
    </>
  );
}

const hostOf = (uri: string) => {
  try {
    return new URL(uri).host;
  } catch {
    return uri;
  }
};

function ClientGrant({
  grant,
  agentId,
  user,
  onRevoked,
}: {
  grant: Grant;
  agentId: string;
  user: SignedInUser;
  onRevoked: () => Promise<void>;
}) {
  const action = useAction(onRevoked);
  const name = grant.client_name ?? 'unnamed client';
  return (
    <>
      <h3>{grant.client_name ?? <span class="muted">unnamed client</span>}</h3>
      <dl class="facts">
        <dt>Client id</dt>
        <dd>
          <code>{grant.client_id}</code>
        </dd>
        <dt>Redirect host</dt>
        <dd>{hostOf(grant.redirect_uri)}</dd>
        <dt>Approved by</dt>
        <dd>{grant.approved_by}</dd>
        <dt>Created</dt>
        <dd>
          <Time value={grant.created_at} />
        </dd>
        <dt>Last used</dt>
        <dd>{grant.last_used_at ? <Time value={grant.last_used_at} /> : 'not yet'}</dd>
      </dl>
      {canDecide(user) && (
        <div class="buttons">
          <ConfirmButton
            label="Revoke"
            confirmLabel="Yes, revoke"
            question={`Revoke ${name}?`}
            tone="danger"
            busy={action.busy}
            onConfirm={() =>
              action.run(() => request(RevokeAgentGrantDocument, { agent_id: agentId, grant_id: grant.grant_id }))
            }
          >
            Revoke {name}? Its tokens stop working at once; it must be allowed again to reconnect.
          </ConfirmButton>
        </div>
      )}
      <ErrorLine message={action.error} />
    </>
  );
}
