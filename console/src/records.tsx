/**
 * Records (the signed decisions of the gateway: filters, verify one, download the export) and
 * the audit log (who changed what, with filters).
 */
import { useId, useState } from 'preact/hooks';
import {
  AuditLogsDocument,
  RecordInLogDocument,
  RecordsDocument,
  VerifyRecordDocument,
  type RecordsQuery,
  type RecordStatus,
  type VerifyRecordQuery,
} from '../generated/graphql';
import { ApiError, canDecide, currentToken, request, type SignedInUser } from './api';
import { checkLogPlace, type LogCheck } from './transparency';
import { counted, ErrorLine, FilterField, messageOf, Partial, Section, Status, Time, usePolled } from './ui';

type RecordItem = RecordsQuery['records']['items'][number];
type Verification = VerifyRecordQuery['verify_record'];

const PAGE_SIZE = 50;

/** A `datetime-local` value (the browser's time zone) as the API's timestamp, or null when empty. */
function timestamp(local: string): string | null {
  const date = new Date(local);
  return local && !Number.isNaN(date.getTime()) ? date.toISOString() : null;
}
const orNull = (text: string) => text.trim() || null;

export function RecordsPage({ user }: { user: SignedInUser }) {
  const [agentId, setAgentId] = useState('');
  const [status, setStatus] = useState<RecordStatus | ''>('');
  const [action, setAction] = useState('');
  const [label, setLabel] = useState('');
  const [from, setFrom] = useState('');
  const [to, setTo] = useState('');
  const [downloadError, setDownloadError] = useState<string | undefined>(undefined);
  const id = useId();
  const filters = {
    agent_id: orNull(agentId),
    status: status || null,
    action: orNull(action),
    label: orNull(label),
    from: timestamp(from),
    to: timestamp(to),
  };
  const records = usePolled(() => request(RecordsDocument, { ...filters, limit: PAGE_SIZE }), JSON.stringify(filters));
  const list = records.data?.records;

  // The export is a signed JSON Lines stream that GraphQL does not carry: the documented REST
  // route, with the same bearer token.
  const download = async () => {
    setDownloadError(undefined);
    try {
      const query = new URLSearchParams();
      if (filters.from) query.set('from', filters.from);
      if (filters.to) query.set('to', filters.to);
      const token = await currentToken();
      const response = await fetch(`/api/v1/records/export?${query}`, {
        headers: token ? { authorization: `Bearer ${token}` } : {},
      });
      if (!response.ok) {
        const body = await response.json().catch(() => undefined);
        throw new Error(
          body?.error?.message ?? body?.detail?.message ?? `The export failed with HTTP ${response.status}`,
        );
      }
      const url = URL.createObjectURL(await response.blob());
      const link = document.createElement('a');
      link.href = url;
      link.download = `records-${new Date().toISOString().slice(0, 19).replace(/:/g, '')}.jsonl`;
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10_000);
    } catch (failure) {
      setDownloadError(messageOf(failure));
    }
  };

  return (
    <Section title="Records" actions={<p class="count">{list ? counted(list.total, 'record') : 'Loading…'}</p>}>
      <form class="filters" onSubmit={(e) => e.preventDefault()} aria-label="Record filters">
        <FilterField label="Agent id" value={agentId} onChange={setAgentId} />
        <span class="field">
          <label for={`${id}-status`}>Status</label>
          <select
            id={`${id}-status`}
            value={status}
            onChange={(e) => setStatus(e.currentTarget.value as RecordStatus | '')}
          >
            <option value="">all</option>
            <option value="approved">approved</option>
            <option value="denied">denied</option>
          </select>
        </span>
        <FilterField label="Action (type or type:tool)" value={action} onChange={setAction} />
        <FilterField label="Label" value={label} onChange={setLabel} />
        <FilterField label="From" type="datetime-local" value={from} onChange={setFrom} />
        <FilterField label="To" type="datetime-local" value={to} onChange={setTo} />
        {canDecide(user) && (
          <button type="button" onClick={() => void download()}>
            Download export
          </button>
        )}
      </form>
      <ErrorLine message={downloadError} />
      <ErrorLine message={records.error} />
      {list && list.items.length === 0 && <p class="empty">No records match.</p>}
      {list && <Partial shown={list.items.length} total={list.total} />}
      <ul class="cards">
        {list?.items.map((record) => (
          <li key={record.record_id}>
            <RecordCard record={record} />
          </li>
        ))}
      </ul>
    </Section>
  );
}

function RecordCard({ record }: { record: RecordItem }) {
  const [verification, setVerification] = useState<Verification | undefined>(undefined);
  const [inLog, setInLog] = useState<LogCheck | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const verify = async () => {
    setError(undefined);
    try {
      const [checked, place] = await Promise.all([
        request(VerifyRecordDocument, { record_id: record.record_id }),
        logPlace(record),
      ]);
      setVerification(checked.verify_record);
      setInLog(place);
    } catch (failure) {
      setError(messageOf(failure));
    }
  };
  return (
    <article class="card" aria-label={`Record ${record.seq}`} data-record-id={record.record_id}>
      <header class="card-header">
        <h2>
          #{record.seq} <code>{record.capability}</code>
        </h2>
        <Status value={record.status} />
      </header>
      <dl class="facts">
        <dt>When</dt>
        <dd>
          <Time value={record.created_at} />
        </dd>
        <dt>Agent</dt>
        <dd>
          <code>{record.agent_id}</code>
        </dd>
        <dt>Executed</dt>
        <dd>
          {record.executed ? 'yes' : 'no'}
          {record.channel && <> (via {record.channel})</>}
        </dd>
        {record.reasons.length > 0 && (
          <>
            <dt>Reasons</dt>
            <dd>
              <ul class="reasons">
                {record.reasons.map((reason) => (
                  <li>
                    <code>{reason.code}</code> {reason.message}
                  </li>
                ))}
              </ul>
            </dd>
          </>
        )}
        {record.policies && record.policies.length > 0 && (
          <>
            <dt>Policies</dt>
            <dd>{record.policies.map((p) => `${p.name} (${p.effect}, ${p.mode})`).join(', ')}</dd>
          </>
        )}
        {record.labels.length > 0 && (
          <>
            <dt>Labels</dt>
            <dd>
              {record.labels.map((name) => (
                <span class="label" key={name}>
                  {name}
                </span>
              ))}
            </dd>
          </>
        )}
        {record.redactions && record.redactions.length > 0 && (
          <>
            <dt>Redacted</dt>
            <dd>{record.redactions.map((r) => `${r.count} ${r.kind}`).join(', ')}</dd>
          </>
        )}
      </dl>
      <details>
        <summary>Params</summary>
        <pre class="json">{JSON.stringify(record.action.params, null, 2)}</pre>
      </details>
      <div class="buttons">
        <button type="button" onClick={() => void verify()}>
          Verify
        </button>
      </div>
      {verification && (
        <p class={verification.valid ? 'verified' : 'error'} role="status">
          {verification.valid ? 'Verified' : 'NOT valid'}: signature {verification.checks.signature ? 'ok' : 'bad'},
          hash {verification.checks.hash ? 'ok' : 'bad'}, chain {verification.checks.chain ? 'ok' : 'bad'}
        </p>
      )}
      {inLog && (
        <p class={inLog.ok ? 'verified' : 'error'} role="status" aria-label="Transparency log">
          {inLog.ok
            ? `In the transparency log: the signed checkpoint of ${inLog.treeSize} records includes it (checked in this browser)`
            : `Transparency log: ${inLog.reason}`}
        </p>
      )}
      <ErrorLine message={error} />
    </article>
  );
}

/**
 * The record's checkpoint and inclusion proof, checked here (transparency.ts). A record newer than
 * the latest checkpoint is not in a tree yet: the next checkpoint covers it.
 */
async function logPlace(record: RecordItem): Promise<LogCheck> {
  try {
    const log = await request(RecordInLogDocument, { record_id: record.record_id });
    return await checkLogPlace({
      note: log.record_checkpoint.note,
      verifierKeys: log.record_checkpoint_verifier.verifier_keys,
      recordHash: record.record_hash,
      seq: record.seq,
      proof: log.record_proof,
    });
  } catch (failure) {
    if (failure instanceof ApiError && failure.code === 'VALIDATION_ERROR')
      return { ok: false, reason: 'not in a checkpoint yet; the next one will include it' };
    throw failure;
  }
}

export function AuditPage({ user }: { user: SignedInUser }) {
  const [actor, setActor] = useState('');
  const [action, setAction] = useState('');
  const [targetType, setTargetType] = useState('');
  const [targetId, setTargetId] = useState('');
  const [from, setFrom] = useState('');
  const [to, setTo] = useState('');
  const _id = useId();
  const filters = {
    actor: orNull(actor),
    action: orNull(action),
    target_type: orNull(targetType),
    target_id: orNull(targetId),
    from: timestamp(from),
    to: timestamp(to),
  };
  const entries = usePolled(
    () => request(AuditLogsDocument, { org_id: user.org_id, ...filters, limit: PAGE_SIZE }),
    JSON.stringify(filters),
  );
  const list = entries.data?.audit_logs;
  return (
    <Section
      title="Audit log"
      actions={<p class="count">{list ? `${list.total} ${list.total === 1 ? 'entry' : 'entries'}` : 'Loading…'}</p>}
    >
      <form class="filters" onSubmit={(e) => e.preventDefault()} aria-label="Audit log filters">
        <FilterField label="Actor (email, id or key prefix)" value={actor} onChange={setActor} />
        <FilterField label="Action (e.g. manifest or manifest.approved)" value={action} onChange={setAction} />
        <FilterField label="Target type" value={targetType} onChange={setTargetType} />
        <FilterField label="Target id" value={targetId} onChange={setTargetId} />
        <FilterField label="From" type="datetime-local" value={from} onChange={setFrom} />
        <FilterField label="To" type="datetime-local" value={to} onChange={setTo} />
      </form>
      <ErrorLine message={entries.error} />
      {list && list.items.length === 0 && <p class="empty">No entries match.</p>}
      {list && <Partial shown={list.items.length} total={list.total} />}
      <ol class="audit">
        {list?.items.map((entry) => (
          <li key={entry.audit_id} data-audit-id={entry.audit_id}>
            <Time value={entry.created_at} /> <strong>{entry.action}</strong> by{' '}
            {entry.actor.label ?? entry.actor.id ?? entry.actor.type} on {entry.target.type}{' '}
            <code>{entry.target.id}</code>
            {entry.reason && <>: {entry.reason}</>}
            {(entry.before != null || entry.after != null) && (
              <details>
                <summary>Change</summary>
                <pre class="json">{JSON.stringify({ before: entry.before, after: entry.after }, null, 2)}</pre>
              </details>
            )}
          </li>
        ))}
      </ol>
    </Section>
  );
}
