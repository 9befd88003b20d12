/**
 * Manifests: pending reviews with the requested capabilities as checkboxes (approve a subset),
 * suspend, reactivate and revoke with reasons, and each agent's version history.
 */
import { useId, useState } from 'preact/hooks';
import {
  ApproveManifestDocument,
  ManifestHistoryDocument,
  ManifestsDocument,
  ReactivateManifestDocument,
  RejectManifestDocument,
  RevokeManifestDocument,
  SuspendManifestDocument,
  type ManifestHistoryQuery,
  type ManifestStatus,
  type ManifestsQuery,
} from '../generated/graphql';
import { canDecide, request, type SignedInUser } from './api';
import { ErrorLine, messageOf, Partial, Section, Status, StatusFilter, Time, useAction, usePolled } from './ui';

type ManifestItem = ManifestsQuery['manifests']['items'][number];
type HistoryEntry = ManifestHistoryQuery['manifest_history']['items'][number];

const STATUSES: ManifestStatus[] = ['pending', 'active', 'suspended', 'revoked', 'rejected', 'superseded'];

export function ManifestsPage({ user }: { user: SignedInUser }) {
  const [status, setStatus] = useState<ManifestStatus | ''>('pending');
  const manifests = usePolled(
    () => request(ManifestsDocument, { org_id: user.org_id, status: status || null, limit: 100 }),
    status,
  );
  const list = manifests.data?.manifests;
  return (
    <Section
      title="Manifests"
      actions={<p class="count">{list ? `${list.total} ${status || 'in all'}` : 'Loading…'}</p>}
    >
      <StatusFilter statuses={STATUSES} value={status} onChange={setStatus} />
      <ErrorLine message={manifests.error} />
      {list && <Partial shown={list.items.length} total={list.total} />}
      {list && list.items.length === 0 && <p class="empty">No {status || ''} manifests.</p>}
      <ul class="cards">
        {list?.items.map((item) => (
          <li key={item.manifest_id}>
            <ManifestCard item={item} user={user} onChanged={manifests.reload} />
          </li>
        ))}
      </ul>
    </Section>
  );
}

function ManifestCard({
  item,
  user,
  onChanged,
}: {
  item: ManifestItem;
  user: SignedInUser;
  onChanged: () => Promise<void>;
}) {
  const manifest = item.manifest;
  const requested = manifest.capabilities.requested;
  const [chosen, setChosen] = useState<Set<string>>(() => new Set(requested));
  const [text, setText] = useState('');
  const textId = useId();
  const action = useAction(onChanged);
  const mayChange = canDecide(user);
  const ids = { org_id: user.org_id, manifest_id: item.manifest_id };
  const needsHuman = new Set(manifest.constraints?.require_human_approval ?? []);

  const withReason = (run: (reason: string) => Promise<unknown>) => () => {
    if (!text.trim()) return action.setError('A reason is required.');
    return action.run(() => run(text.trim()));
  };
  const toggle = (capability: string, on: boolean) => {
    const next = new Set(chosen);
    if (on) next.add(capability);
    else next.delete(capability);
    setChosen(next);
  };
  const approve = () => {
    if (chosen.size === 0) return action.setError('Choose at least one capability to approve.');
    return action.run(() =>
      request(ApproveManifestDocument, {
        ...ids,
        // In the order requested, whatever order they were ticked in.
        approved_capabilities: requested.filter((c) => chosen.has(c)),
        notes: text.trim() || null,
      }),
    );
  };

  return (
    <article
      class="card"
      aria-label={`Manifest ${item.svc_id} ${manifest.version}`}
      data-manifest-id={item.manifest_id}
    >
      <header class="card-header">
        <h2>
          {item.agent.name} <code>{item.svc_id}</code>
        </h2>
        <Status value={item.status} />
      </header>
      <dl class="facts">
        <dt>Agent version</dt>
        <dd>{item.agent.version}</dd>
        <dt>Team</dt>
        <dd>{item.agent.team ?? '—'}</dd>
        <dt>Registered</dt>
        <dd>
          <Time value={item.created_at} /> by {manifest.created_by}
        </dd>
        <dt>Limits</dt>
        <dd>
          {manifest.constraints?.max_actions_per_hour ?? 100} per hour,{' '}
          {manifest.constraints?.max_actions_per_day ?? 1000} per day
        </dd>
        {manifest.reason && (
          <>
            <dt>Reason</dt>
            <dd>{manifest.reason}</dd>
          </>
        )}
      </dl>
      {item.status === 'pending' && mayChange ? (
        <fieldset class="capabilities">
          <legend>Capabilities to approve</legend>
          {requested.map((capability) => (
            <label class="check">
              <input
                type="checkbox"
                checked={chosen.has(capability)}
                onChange={(e) => toggle(capability, e.currentTarget.checked)}
              />
              <code>{capability}</code>
              {needsHuman.has(capability) && <span class="tag">needs a human per action</span>}
            </label>
          ))}
        </fieldset>
      ) : (
        <div class="capabilities">
          <h3>Capabilities</h3>
          <ul class="capability-list">
            {requested.map((capability) => (
              <li>
                <code>{capability}</code>{' '}
                {manifest.capabilities.approved.includes(capability) ? (
                  <span class="tag ok">approved</span>
                ) : item.status === 'pending' ? (
                  <span class="tag">requested</span>
                ) : (
                  <span class="tag off">not approved</span>
                )}
                {needsHuman.has(capability) && <span class="tag">needs a human per action</span>}
              </li>
            ))}
          </ul>
        </div>
      )}
      {mayChange && ['pending', 'active', 'suspended'].includes(item.status) && (
        <div class="decide">
          <label for={textId}>
            {item.status === 'pending'
              ? 'Notes (approve) or reason (reject, revoke)'
              : 'Reason (or notes to reactivate)'}
          </label>
          <textarea id={textId} rows={2} value={text} onInput={(e) => setText(e.currentTarget.value)} />
          <div class="buttons">
            {item.status === 'pending' && (
              <>
                <button type="button" class="primary" disabled={action.busy} onClick={approve}>
                  Approve selected
                </button>
                <button
                  type="button"
                  class="danger"
                  disabled={action.busy}
                  onClick={withReason((reason) => request(RejectManifestDocument, { ...ids, reason }))}
                >
                  Reject
                </button>
              </>
            )}
            {item.status === 'active' && (
              <button
                type="button"
                disabled={action.busy}
                onClick={withReason((reason) => request(SuspendManifestDocument, { ...ids, reason }))}
              >
                Suspend
              </button>
            )}
            {item.status === 'suspended' && (
              <button
                type="button"
                class="primary"
                disabled={action.busy}
                onClick={() =>
                  action.run(() => request(ReactivateManifestDocument, { ...ids, notes: text.trim() || null }))
                }
              >
                Reactivate
              </button>
            )}
            <button
              type="button"
              class="danger"
              disabled={action.busy}
              onClick={withReason((reason) => request(RevokeManifestDocument, { ...ids, reason }))}
            >
              Revoke
            </button>
          </div>
        </div>
      )}
      <ErrorLine message={action.error} />
      <History user={user} manifestId={item.manifest_id} />
    </article>
  );
}

/** Every version of the agent, loaded when opened. */
function History({ user, manifestId }: { user: SignedInUser; manifestId: string }) {
  const [entries, setEntries] = useState<HistoryEntry[] | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const load = async (open: boolean) => {
    if (!open) return;
    try {
      const result = await request(ManifestHistoryDocument, { org_id: user.org_id, manifest_id: manifestId });
      setEntries(result.manifest_history.items);
      setError(undefined);
    } catch (failure) {
      setError(messageOf(failure));
    }
  };
  return (
    <details class="history" onToggle={(e) => void load(e.currentTarget.open)}>
      <summary>History</summary>
      <ErrorLine message={error} />
      {entries && (
        <ol class="history-list">
          {entries.map((entry) => (
            <li>
              <Time value={entry.changed_at} /> <Status value={entry.status} /> version {entry.agent_version} by{' '}
              {entry.changed_by}
              {entry.changes.length > 0 && <span class="changes"> — {entry.changes.join(', ')}</span>}
            </li>
          ))}
        </ol>
      )}
    </details>
  );
}
