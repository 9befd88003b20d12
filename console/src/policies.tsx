/**
 * Policies: the list in the order the gateway applies them, create and edit (a refused CEL
 * condition is shown at its line and column), and what each policy matched among the latest
 * decisions, shadow policies included (they are evaluated and reported, never enforced).
 */
import { useId, useRef, useState } from 'preact/hooks';
import {
  CreatePolicyDocument,
  PoliciesDocument,
  PolicyMatchesDocument,
  ReplacePolicyDocument,
  type PoliciesQuery,
  type PolicyEffect,
  type PolicyMatchesQuery,
  type PolicyMode,
  type PolicyRateLimitScope,
} from '../generated/graphql';
import { ApiError, canDecide, request, type FieldProblem, type SignedInUser } from './api';
import { ErrorLine, messageOf, Section, Status, Time, usePolled } from './ui';

type Policy = PoliciesQuery['policies']['items'][number];
type MatchRecord = PolicyMatchesQuery['records']['items'][number];

/** How many of the latest decisions the match counts look at. */
const MATCH_WINDOW = 200;

export function PoliciesPage({ user }: { user: SignedInUser }) {
  const policies = usePolled(async () => {
    const [list, matches] = await Promise.all([
      request(PoliciesDocument, { limit: 200 }),
      request(PolicyMatchesDocument, { limit: MATCH_WINDOW }),
    ]);
    return { list: list.policies, records: matches.records.items };
  }, 'policies');
  const [editing, setEditing] = useState<Policy | 'new' | undefined>(undefined);
  const mayChange = canDecide(user);
  const saved = async () => {
    setEditing(undefined);
    await policies.reload();
  };
  const data = policies.data;
  return (
    <Section
      title="Policies"
      actions={
        mayChange && editing === undefined ? (
          <button type="button" class="primary" onClick={() => setEditing('new')}>
            New policy
          </button>
        ) : undefined
      }
    >
      <ErrorLine message={policies.error} />
      {editing === 'new' && <PolicyForm onSaved={saved} onCancel={() => setEditing(undefined)} />}
      {data && data.list.items.length === 0 && <p class="empty">No policies yet.</p>}
      <ul class="cards">
        {data?.list.items.map((policy) =>
          editing !== 'new' && editing?.policy_id === policy.policy_id ? (
            <li key={policy.policy_id}>
              <PolicyForm initial={policy} onSaved={saved} onCancel={() => setEditing(undefined)} />
            </li>
          ) : (
            <li key={policy.policy_id}>
              <PolicyCard
                policy={policy}
                records={data.records}
                onEdit={mayChange && editing === undefined ? () => setEditing(policy) : undefined}
              />
            </li>
          ),
        )}
      </ul>
    </Section>
  );
}

function PolicyCard({ policy, records, onEdit }: { policy: Policy; records: MatchRecord[]; onEdit?: () => void }) {
  const matched = records.filter((record) => record.policies?.some((p) => p.policy_id === policy.policy_id));
  return (
    <article class="card" aria-label={`Policy ${policy.name}`} data-policy-id={policy.policy_id}>
      <header class="card-header">
        <h2>{policy.name}</h2>
        <span>
          <Status value={policy.mode} /> {!policy.enabled && <Status value="disabled" />}
        </span>
      </header>
      {policy.description && <p>{policy.description}</p>}
      <dl class="facts">
        <dt>Effect</dt>
        <dd>
          {policy.effect}
          {policy.rate_limit && (
            <>
              : {policy.rate_limit.limit} per {policy.rate_limit.window_seconds} s per {policy.rate_limit.per}
            </>
          )}
          {policy.labels && <>: {policy.labels.join(', ')}</>}
          {policy.detectors && <>: {policy.detectors.join(', ')}</>}
        </dd>
        {policy.history_window_seconds != null && (
          <>
            <dt>History</dt>
            <dd>the agent’s decisions of the last {policy.history_window_seconds} s</dd>
          </>
        )}
        <dt>Priority</dt>
        <dd>{policy.priority}</dd>
        <dt>Agents</dt>
        <dd>{policy.target.svc_ids?.join(', ') || 'all'}</dd>
        <dt>Capabilities</dt>
        <dd>{policy.target.capabilities?.join(', ') || 'all'}</dd>
        <dt>Condition</dt>
        <dd>{policy.condition ? <code>{policy.condition}</code> : 'always'}</dd>
        {policy.message && (
          <>
            <dt>Message</dt>
            <dd>{policy.message}</dd>
          </>
        )}
        <dt>Version</dt>
        <dd>
          {policy.version}, <Time value={policy.updated_at} /> by {policy.updated_by}
        </dd>
      </dl>
      <div class="matches">
        <h3>{policy.mode === 'shadow' ? 'Shadow matches (reported, not enforced)' : 'Matches'}</h3>
        <p>
          {matched.length} of the latest {records.length} decisions
        </p>
        {matched.length > 0 && (
          <ul class="history-list">
            {matched.slice(0, 5).map((record) => (
              <li>
                <Time value={record.created_at} /> <code>{record.agent_id}</code> <code>{record.capability}</code> →{' '}
                {record.decision}
              </li>
            ))}
          </ul>
        )}
      </div>
      {onEdit && (
        <div class="buttons">
          <button type="button" onClick={onEdit}>
            Edit
          </button>
        </div>
      )}
    </article>
  );
}

const list = (text: string) =>
  text
    .split(/[\s,]+/)
    .map((part) => part.trim())
    .filter(Boolean);

/** The condition's line with a caret under the column the parser named. */
function ConditionProblem({ condition, problem, id }: { condition: string; problem: FieldProblem; id: string }) {
  const position = problem.position;
  const line = position ? (condition.split('\n')[position.line - 1] ?? '') : undefined;
  return (
    <div class="cel-error" id={id} role="alert">
      <p class="error">{problem.message}</p>
      {position && line !== undefined && (
        <pre class="caret" role="note" aria-label={`at line ${position.line}, column ${position.column}`}>
          {`${line}\n${' '.repeat(Math.max(0, position.column - 1))}^`}
        </pre>
      )}
    </div>
  );
}

const DETECTORS = ['secrets', 'pii', 'hidden_text'];

/**
 * Policies an operator starts from, created in shadow mode: what they would do shows in their
 * matches before they are enforced. The "lethal trifecta" is two of them: a label, then a denial
 * over the agent's history.
 */
const EXAMPLES: {
  name: string;
  description: string;
  effect: PolicyEffect;
  capabilities: string;
  condition?: string;
  labels?: string;
  detectors?: string[];
  history_window_seconds?: number;
  message?: string;
}[] = [
  {
    name: 'Label private reads',
    description: 'Trifecta, part 1: reads of private data are labelled private.',
    effect: 'label',
    capabilities: 'files:read, crm:*',
    labels: 'private',
  },
  {
    name: 'Nothing out after private data',
    description: 'Trifecta, part 2: an agent that read private data in the last hour sends nothing out.',
    effect: 'deny',
    capabilities: 'email:*, http:post',
    condition: 'history.exists(h, "private" in h.labels && h.executed)',
    history_window_seconds: 3600,
    message: 'this agent read private data in the last hour',
  },
  {
    name: 'No secrets in params',
    description: 'Deny any call whose arguments carry a key, a token or a private key.',
    effect: 'deny',
    capabilities: '',
    condition: 'secrets(params).size() > 0',
    message: 'the arguments carry a secret',
  },
  {
    name: 'Redact PII in results',
    description:
      'Emails, phone numbers, cards, IBANs and SSNs in tool results are replaced before the agent sees them.',
    effect: 'redact',
    capabilities: '',
    detectors: ['pii'],
  },
];

function PolicyForm({
  initial,
  onSaved,
  onCancel,
}: {
  initial?: Policy;
  onSaved: () => Promise<void>;
  onCancel: () => void;
}) {
  const [name, setName] = useState(initial?.name ?? '');
  const [description, setDescription] = useState(initial?.description ?? '');
  const [enabled, setEnabled] = useState(initial?.enabled ?? true);
  const [mode, setMode] = useState<PolicyMode>(initial?.mode ?? 'enforce');
  const [effect, setEffect] = useState<PolicyEffect>(initial?.effect ?? 'deny');
  const [priority, setPriority] = useState(String(initial?.priority ?? 100));
  const [svcIds, setSvcIds] = useState(initial?.target.svc_ids?.join(', ') ?? '');
  const [capabilities, setCapabilities] = useState(initial?.target.capabilities?.join(', ') ?? '');
  const [condition, setCondition] = useState(initial?.condition ?? '');
  const [message, setMessage] = useState(initial?.message ?? '');
  const [limit, setLimit] = useState(String(initial?.rate_limit?.limit ?? 10));
  const [windowSeconds, setWindowSeconds] = useState(String(initial?.rate_limit?.window_seconds ?? 60));
  const [per, setPer] = useState<PolicyRateLimitScope>(initial?.rate_limit?.per ?? 'agent');
  const [labels, setLabels] = useState(initial?.labels?.join(', ') ?? '');
  const [detectors, setDetectors] = useState<string[]>(initial?.detectors ?? ['secrets', 'pii']);
  const [historyWindow, setHistoryWindow] = useState(String(initial?.history_window_seconds ?? ''));
  const [problems, setProblems] = useState<FieldProblem[]>([]);
  const [error, setError] = useState<string | undefined>(undefined);
  const [busy, setBusy] = useState(false);
  const conditionRef = useRef<HTMLTextAreaElement>(null);
  const id = useId();

  const save = async (event: Event) => {
    event.preventDefault();
    setBusy(true);
    setError(undefined);
    setProblems([]);
    const svc_ids = list(svcIds);
    const caps = list(capabilities);
    const variables = {
      name,
      description,
      enabled,
      mode,
      effect,
      // Whatever was typed goes to the API, which says what is wrong with it.
      priority: priority.trim() === '' ? null : Number(priority),
      target:
        svc_ids.length || caps.length
          ? { svc_ids: svc_ids.length ? svc_ids : null, capabilities: caps.length ? caps : null }
          : null,
      condition: condition.trim() === '' ? null : condition,
      message: message.trim() === '' ? null : message,
      rate_limit: effect === 'rate_limit' ? { limit: Number(limit), window_seconds: Number(windowSeconds), per } : null,
      labels: effect === 'label' ? list(labels) : null,
      detectors: effect === 'redact' ? detectors : null,
      history_window_seconds: historyWindow.trim() === '' ? null : Number(historyWindow),
    };
    try {
      if (initial) await request(ReplacePolicyDocument, { policy_id: initial.policy_id, ...variables });
      else await request(CreatePolicyDocument, variables);
      await onSaved();
    } catch (failure) {
      const fieldProblems = failure instanceof ApiError ? (failure.details?.errors ?? []) : [];
      setProblems(fieldProblems);
      setError(fieldProblems.length ? 'The policy was not saved; see what the service refused.' : messageOf(failure));
      const atCondition = fieldProblems.find((p) => p.field === 'condition' && p.position);
      if (atCondition?.position && conditionRef.current) {
        // The cursor where the parser stopped.
        conditionRef.current.focus();
        conditionRef.current.setSelectionRange(atCondition.position.offset, atCondition.position.offset);
      }
    } finally {
      setBusy(false);
    }
  };
  const conditionProblem = problems.find((p) => p.field === 'condition');
  const otherProblems = problems.filter((p) => p !== conditionProblem);
  const field = (suffix: string) => `${id}-${suffix}`;

  return (
    <form class="card policy-form" onSubmit={save} aria-label={initial ? `Edit policy ${initial.name}` : 'New policy'}>
      <h2>{initial ? `Edit ${initial.name} (version ${initial.version})` : 'New policy'}</h2>
      {!initial && (
        <div class="examples" role="group" aria-label="Examples">
          <span>Start from an example:</span>
          {EXAMPLES.map((example) => (
            <button
              type="button"
              key={example.name}
              onClick={() => {
                setName(example.name);
                setDescription(example.description);
                setEffect(example.effect);
                setMode('shadow');
                setCapabilities(example.capabilities);
                setCondition(example.condition ?? '');
                setHistoryWindow(example.history_window_seconds ? String(example.history_window_seconds) : '');
                setLabels(example.labels ?? '');
                if (example.detectors) setDetectors(example.detectors);
                setMessage(example.message ?? '');
              }}
            >
              {example.name}
            </button>
          ))}
        </div>
      )}
      <label for={field('name')}>Name</label>
      <input
        id={field('name')}
        type="text"
        required
        maxLength={100}
        value={name}
        onInput={(e) => setName(e.currentTarget.value)}
      />
      <label for={field('description')}>Description</label>
      <input
        id={field('description')}
        type="text"
        value={description}
        onInput={(e) => setDescription(e.currentTarget.value)}
      />
      <div class="row">
        <span>
          <label for={field('effect')}>Effect</label>
          <select
            id={field('effect')}
            value={effect}
            onChange={(e) => setEffect(e.currentTarget.value as PolicyEffect)}
          >
            <option value="deny">deny</option>
            <option value="require_approval">require_approval</option>
            <option value="rate_limit">rate_limit</option>
            <option value="label">label</option>
            <option value="redact">redact (the result)</option>
            <option value="deny_result">deny_result (the result)</option>
          </select>
        </span>
        <span>
          <label for={field('mode')}>Mode</label>
          <select id={field('mode')} value={mode} onChange={(e) => setMode(e.currentTarget.value as PolicyMode)}>
            <option value="enforce">enforce</option>
            <option value="shadow">shadow</option>
          </select>
        </span>
        <span>
          <label for={field('priority')}>Priority</label>
          <input
            id={field('priority')}
            type="number"
            min={0}
            max={1000}
            value={priority}
            onInput={(e) => setPriority(e.currentTarget.value)}
          />
        </span>
        <label class="check">
          <input type="checkbox" checked={enabled} onChange={(e) => setEnabled(e.currentTarget.checked)} /> Enabled
        </label>
      </div>
      {effect === 'rate_limit' && (
        <fieldset class="row">
          <legend>Rate limit</legend>
          <span>
            <label for={field('limit')}>Actions</label>
            <input
              id={field('limit')}
              type="number"
              min={1}
              value={limit}
              onInput={(e) => setLimit(e.currentTarget.value)}
            />
          </span>
          <span>
            <label for={field('window')}>Window (seconds)</label>
            <input
              id={field('window')}
              type="number"
              min={1}
              max={86400}
              value={windowSeconds}
              onInput={(e) => setWindowSeconds(e.currentTarget.value)}
            />
          </span>
          <span>
            <label for={field('per')}>Counted per</label>
            <select
              id={field('per')}
              value={per}
              onChange={(e) => setPer(e.currentTarget.value as PolicyRateLimitScope)}
            >
              <option value="agent">agent</option>
              <option value="api_key">api_key</option>
              <option value="org">org</option>
            </select>
          </span>
        </fieldset>
      )}
      {effect === 'label' && (
        <>
          <label for={field('labels')}>Labels (comma-separated, such as private)</label>
          <input id={field('labels')} type="text" value={labels} onInput={(e) => setLabels(e.currentTarget.value)} />
        </>
      )}
      {effect === 'redact' && (
        <fieldset class="row">
          <legend>Redact in the result</legend>
          {DETECTORS.map((detector) => (
            <label class="check" key={detector}>
              <input
                type="checkbox"
                checked={detectors.includes(detector)}
                onChange={(e) =>
                  setDetectors(
                    e.currentTarget.checked
                      ? DETECTORS.filter((d) => d === detector || detectors.includes(d))
                      : detectors.filter((d) => d !== detector),
                  )
                }
              />{' '}
              {detector}
            </label>
          ))}
        </fieldset>
      )}
      <label for={field('history')}>History window (seconds; the condition sees `history`; empty: none)</label>
      <input
        id={field('history')}
        type="number"
        min={1}
        max={86400}
        value={historyWindow}
        onInput={(e) => setHistoryWindow(e.currentTarget.value)}
      />
      <label for={field('svc')}>Agents (ids, comma-separated; empty: all)</label>
      <input id={field('svc')} type="text" value={svcIds} onInput={(e) => setSvcIds(e.currentTarget.value)} />
      <label for={field('caps')}>Capabilities (patterns such as billing:*; empty: all)</label>
      <input
        id={field('caps')}
        type="text"
        value={capabilities}
        onInput={(e) => setCapabilities(e.currentTarget.value)}
      />
      <label for={field('condition')}>Condition (CEL; empty: always)</label>
      <textarea
        id={field('condition')}
        ref={conditionRef}
        rows={3}
        spellcheck={false}
        value={condition}
        aria-invalid={conditionProblem ? 'true' : undefined}
        aria-describedby={conditionProblem ? field('condition-problem') : undefined}
        onInput={(e) => setCondition(e.currentTarget.value)}
      />
      {conditionProblem && (
        <ConditionProblem condition={condition} problem={conditionProblem} id={field('condition-problem')} />
      )}
      <label for={field('message')}>Message to the agent</label>
      <input
        id={field('message')}
        type="text"
        maxLength={500}
        value={message}
        onInput={(e) => setMessage(e.currentTarget.value)}
      />
      {error && (
        <div role="alert">
          <p class="error">{error}</p>
          {otherProblems.length > 0 && (
            <ul class="error">
              {otherProblems.map((p) => (
                <li>
                  <code>{p.field}</code>: {p.message}
                </li>
              ))}
            </ul>
          )}
        </div>
      )}
      <div class="buttons">
        <button type="submit" class="primary" disabled={busy}>
          {initial ? 'Save' : 'Create'}
        </button>
        <button type="button" onClick={onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}
