/** Approvals inbox: pending first with their count; approve with notes, deny with a reason. */
import { useId, useState } from 'preact/hooks';
import {
  ApprovalsDocument,
  ApproveApprovalDocument,
  DenyApprovalDocument,
  type ApprovalStatus,
  type ApprovalsQuery,
} from '../generated/graphql';
import { canDecide, request, type SignedInUser } from './api';
import { ErrorLine, Partial, Section, Status, StatusFilter, Time, useAction, usePolled } from './ui';

type Approval = ApprovalsQuery['approvals']['items'][number];

const STATUSES: ApprovalStatus[] = ['pending', 'approved', 'denied', 'expired', 'consumed'];

export function ApprovalsPage({ user }: { user: SignedInUser }) {
  const [status, setStatus] = useState<ApprovalStatus | ''>('pending');
  const approvals = usePolled(
    () => request(ApprovalsDocument, { org_id: user.org_id, status: status || null, limit: 100 }),
    status,
  );
  const list = approvals.data?.approvals;
  // Pending first (what needs someone), each group newest first as the API lists them.
  const items = list
    ? [...list.items].sort((a, b) => Number(b.status === 'pending') - Number(a.status === 'pending'))
    : [];
  return (
    <Section
      title="Approvals"
      actions={
        <p class="count" aria-live="polite">
          {list ? `${list.pending_count} pending` : 'Loading…'}
        </p>
      }
    >
      <StatusFilter statuses={STATUSES} value={status} onChange={setStatus} />
      <ErrorLine message={approvals.error} />
      {list && <Partial shown={list.items.length} total={list.total} />}
      {list && list.items.length === 0 && <p class="empty">No {status || ''} approvals.</p>}
      <ul class="cards">
        {items.map((approval) => (
          <li key={approval.approval_id}>
            <ApprovalCard approval={approval} user={user} onDecided={approvals.reload} />
          </li>
        ))}
      </ul>
    </Section>
  );
}

function ApprovalCard({
  approval,
  user,
  onDecided,
}: {
  approval: Approval;
  user: SignedInUser;
  onDecided: () => Promise<void>;
}) {
  const [text, setText] = useState('');
  const textId = useId();
  const action = useAction(onDecided);
  const decidable = approval.status === 'pending' && canDecide(user);
  const org_id = user.org_id;
  const approve = () =>
    action.run(() =>
      request(ApproveApprovalDocument, { org_id, approval_id: approval.approval_id, notes: text.trim() || null }),
    );
  const deny = () => {
    if (!text.trim()) return action.setError('A reason is required to deny.');
    return action.run(() =>
      request(DenyApprovalDocument, { org_id, approval_id: approval.approval_id, reason: text.trim() }),
    );
  };
  return (
    <article class="card" aria-label={`Approval ${approval.approval_id}`} data-approval-id={approval.approval_id}>
      <header class="card-header">
        <h2>
          <code>{approval.capability}</code>
        </h2>
        <Status value={approval.status} />
      </header>
      <dl class="facts">
        <dt>Agent</dt>
        <dd>
          {approval.agent.name} (<code>{approval.agent.agent_id}</code>)
        </dd>
        <dt>Manifest</dt>
        <dd>
          version {approval.manifest.agent_version} <Status value={approval.manifest.status} />
        </dd>
        <dt>Why a human</dt>
        <dd>
          <ul class="reasons">
            {approval.reasons.map((reason) => (
              <li>
                <code>{reason.code}</code> {reason.message}
              </li>
            ))}
          </ul>
        </dd>
        <dt>Requested</dt>
        <dd>
          <Time value={approval.requested_at} />
        </dd>
        <dt>{approval.status === 'pending' ? 'Expires' : 'Decided'}</dt>
        <dd>
          {approval.status === 'pending' ? (
            <Time value={approval.expires_at} />
          ) : (
            <>
              <Time value={approval.decided_at} /> {approval.decided_by && <>by {approval.decided_by}</>}
            </>
          )}
        </dd>
        {(approval.notes || approval.reason) && (
          <>
            <dt>{approval.reason ? 'Reason' : 'Notes'}</dt>
            <dd>{approval.reason ?? approval.notes}</dd>
          </>
        )}
      </dl>
      <details open={approval.status === 'pending'}>
        <summary>
          Action <code>{approval.action.type}</code> / <code>{approval.action.tool}</code> params
        </summary>
        <pre class="json">{JSON.stringify(approval.action.params, null, 2)}</pre>
      </details>
      {decidable && (
        <div class="decide">
          <label for={textId}>Notes (approve) or reason (deny)</label>
          <textarea id={textId} rows={2} value={text} onInput={(e) => setText(e.currentTarget.value)} />
          <div class="buttons">
            <button type="button" class="primary" disabled={action.busy} onClick={approve}>
              Approve
            </button>
            <button type="button" class="danger" disabled={action.busy} onClick={deny}>
              Deny
            </button>
          </div>
        </div>
      )}
      <ErrorLine message={action.error} />
    </article>
  );
}
