/** Agents: status, current manifest, usage against the manifest's budgets; deactivate and reactivate. */
import { useId, useState } from 'preact/hooks';
import {
  AgentsDocument,
  DeactivateAgentDocument,
  ReactivateAgentDocument,
  type AgentStatus,
  type AgentsQuery,
} from '../generated/graphql';
import { canDecide, request, type SignedInUser } from './api';
import { counted, ErrorLine, FilterField, Partial, Section, Status, Time, useAction, usePolled } from './ui';

type Agent = AgentsQuery['agents']['items'][number];
type UsageWindow = Agent['usage']['hour'];

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
            <meter min={0} max={window.limit} value={window.count} aria-label={`${label}: ${window.count} of ${window.limit}`} />{' '}
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
          <input id={reasonId} type="text" maxLength={1000} value={reason} onInput={(e) => setReason(e.currentTarget.value)} />
          <div class="buttons">
            <button
              type="button"
              class="danger"
              disabled={action.busy}
              onClick={() => action.run(() => request(DeactivateAgentDocument, { agent_id: agent.agent_id, reason: reason.trim() || null }))}
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
    </article>
  );
}
