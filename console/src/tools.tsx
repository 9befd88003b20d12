/**
 * Tools: the org's tool connectors and, for mcp tools, their upstream's tool definitions as pinned
 * and as the upstream shows them now (docs/decisions/0050-upstream-tool-definitions.md). A
 * definition that moved away from its pin holds its calls until an operator reads its diff here
 * and accepts it; Refresh reads the upstream now instead of at the next periodic read.
 *
 * Everything a definition holds is the upstream's text, hostile input: it is only ever rendered as
 * text nodes (Preact escapes them), never as HTML.
 */
import { escapeHiddenCharacters } from './hidden-characters';
import { useEffect, useRef, useState } from 'preact/hooks';
import {
  AcceptToolDefinitionsDocument,
  RefreshToolDefinitionsDocument,
  ToolDriftDocument,
  ToolsDocument,
  type ToolsQuery,
} from '../generated/graphql';
import { ApiError, canDecide, request, type SignedInUser } from './api';
import { ConnectionOutcome, ToolConnections, toolIdFromLocation } from './tool-connections';
import { ConfirmButton, counted, ErrorLine, Section, Status, Time, useAction, usePolled } from './ui';

type Tool = ToolsQuery['tools']['items'][number];
type Definition = Tool['definitions'][number];
type Acceptance = { name: string; current_hash: string | null };

const needsReview = (definition: Pick<Definition, 'status'>) => definition.status !== 'pinned';

/** How many definitions of these tools wait for an operator. */
export const driftOf = (tools: readonly { definitions: readonly Pick<Definition, 'status'>[] }[]) =>
  tools.reduce((sum, tool) => sum + tool.definitions.filter(needsReview).length, 0);

/** What waits for review first, then by name: the order an operator works in. */
const forReview = (definitions: readonly Definition[]) =>
  [...definitions].sort((a, b) => Number(needsReview(b)) - Number(needsReview(a)) || a.name.localeCompare(b.name));

/** A hash as people compare them: its first 12 hex digits (48 bits; the full one is in the API). */
const shortHash = (hash: string) => `${hash.slice(0, 12)}…`;

/** The drift count as the Tools page last loaded it, for the navigation while that page is open. */
const driftListeners = new Set<(count: number) => void>();
const reportDrift = (count: number) => driftListeners.forEach((listener) => listener(count));

/**
 * How many definitions wait for review, for the navigation: what the Tools page loads while it is
 * open (no second poll beside its own), else polled with a query of statuses only. Undefined for
 * viewers, whom the API does not show tools.
 */
export function useToolDrift(user: SignedInUser, onToolsPage: boolean): number | undefined {
  const [reported, setReported] = useState<number | undefined>(undefined);
  useEffect(() => {
    driftListeners.add(setReported);
    return () => void driftListeners.delete(setReported);
  }, []);
  const polls = canDecide(user) && !onToolsPage;
  const polled = usePolled(
    async () => (polls ? driftOf((await request(ToolDriftDocument, { org_id: user.org_id })).tools.items) : undefined),
    String(polls),
  );
  if (!canDecide(user)) return undefined;
  return onToolsPage ? reported : polled.data;
}

export function ToolsPage({ user }: { user: SignedInUser }) {
  // The API lets only admins and operators read tools (`tool:manage`: a tool's config names its
  // upstream and the headers sent there); the navigation does not offer the page to viewers, and
  // its address says why instead of showing a refusal. A tool's own address still shows a viewer
  // their connection of it: that is where they connect their account.
  const toolId = toolIdFromLocation();
  if (!canDecide(user)) {
    return (
      <Section title="Tools">
        <ConnectionOutcome />
        {toolId ? (
          // A viewer may connect only their own account: what a per-user tool asks of them.
          <ToolConnections orgId={user.org_id} toolId={toolId} user={user} scope="user" />
        ) : (
          <p>Tool connectors and their upstream definitions are shown to admins and operators only.</p>
        )}
      </Section>
    );
  }
  return <ToolList orgId={user.org_id} user={user} />;
}

function ToolList({ orgId, user }: { orgId: string; user: SignedInUser }) {
  const tools = usePolled(() => request(ToolsDocument, { org_id: orgId }), orgId);
  const list = tools.data?.tools;
  const drift = list ? driftOf(list.items) : 0;
  useEffect(() => {
    if (list) reportDrift(drift);
  }, [list, drift]);
  return (
    <Section
      title="Tools"
      actions={
        <p class="count" aria-live="polite">
          {list
            ? `${counted(list.total, 'tool')}${drift ? `, ${counted(drift, 'definition')} to review` : ''}`
            : 'Loading…'}
        </p>
      }
    >
      <p class="muted intro">
        An mcp tool pins its upstream’s tool definitions at the first read. A definition the upstream changes, adds or
        drops is shown here with its diff, and calls of it are denied until it is accepted.
      </p>
      <ConnectionOutcome />
      <ErrorLine message={tools.error} />
      {list && list.items.length === 0 && (
        <p class="empty">
          No tool connectors. Configure one through the API, <code>POST /api/v1/orgs/{orgId}/tools</code>.
        </p>
      )}
      <ul class="cards tools">
        {list?.items.map((tool) => (
          <li key={tool.tool_id}>
            <ToolCard tool={tool} orgId={orgId} user={user} onChanged={tools.reload} />
          </li>
        ))}
      </ul>
    </Section>
  );
}

/** Said when an accept is refused because the upstream moved after the diff was read (409). */
const MOVED_AGAIN =
  'The upstream changed this definition again after the diff you reviewed: nothing was accepted. Review what it shows now and accept again.';

/**
 * Accepts the definitions as reviewed. A 409 (one moved again since) reloads the page before it
 * is reported, so the definition as it is now stands beside the reason nothing was accepted.
 */
async function acceptDefinitions(
  orgId: string,
  toolId: string,
  definitions: Acceptance[],
  reload: () => Promise<void>,
): Promise<string> {
  try {
    await request(AcceptToolDefinitionsDocument, { org_id: orgId, tool_id: toolId, definitions });
  } catch (failure) {
    if (!(failure instanceof ApiError && failure.code === 'CONFLICT')) throw failure;
    await reload();
    throw new ApiError(MOVED_AGAIN, failure.code);
  }
  return `Accepted ${definitions.map((d) => d.name).join(', ')}: calls go to the upstream again.`;
}

/** An action that says what it did: `run` shows its notice, or its failure, in place of the last. */
function useNoticedAction(after: () => Promise<void>) {
  const action = useAction(after);
  const [notice, setNotice] = useState<string | undefined>(undefined);
  const run = (work: () => Promise<string>) =>
    action.run(async () => {
      setNotice(undefined);
      setNotice(await work());
    });
  return { ...action, run, notice };
}

function Outcome({ error, notice }: { error: string | undefined; notice: string | undefined }) {
  return (
    <>
      <ErrorLine message={error} />
      {notice && (
        <p class="notice" role="status">
          {notice}
        </p>
      )}
    </>
  );
}

/** What a Refresh found, said with its time (the notice stays until the next action). */
function readOutcome(tool: Tool): string {
  const at = new Date(tool.definitions_checked_at ?? Date.now()).toLocaleTimeString();
  if (tool.definitions_error) return `Read the upstream at ${at}: it could not be read (said above).`;
  const drift = driftOf([tool]);
  return `Read the upstream at ${at}: ${drift ? `${counted(drift, 'definition')} to review` : 'every definition is as pinned'}.`;
}

function ToolCard(props: { tool: Tool; orgId: string; user: SignedInUser; onChanged: () => Promise<void> }) {
  const { tool, orgId, onChanged } = props;
  const action = useNoticedAction(onChanged);
  const auth = tool.config.auth as { type?: string; connection?: string } | undefined;
  const mcp = tool.connector === 'mcp';
  const drifting = tool.definitions.filter(needsReview);
  const url = typeof tool.config.url === 'string' ? tool.config.url : undefined;
  const upstreamTool = typeof tool.config.tool === 'string' ? tool.config.tool : undefined;
  const refresh = () =>
    action.run(async () => {
      const read = await request(RefreshToolDefinitionsDocument, { org_id: orgId, tool_id: tool.tool_id });
      return readOutcome(read.refresh_tool_definitions);
    });
  const accept = (definitions: Acceptance[]) => acceptDefinitions(orgId, tool.tool_id, definitions, onChanged);
  const heading = useRef<HTMLHeadingElement>(null);
  const acceptAll = (definitions: Acceptance[]) =>
    action.run(async () => {
      const done = await accept(definitions);
      // Accept all is about to go: the focus stays with the tool, not the top of the page.
      heading.current?.focus();
      return done;
    });

  return (
    <article class="card" aria-label={`Tool ${tool.action_type}`} data-tool-id={tool.tool_id}>
      <header class="card-header">
        <h2 ref={heading} tabIndex={-1}>
          {tool.action_type}
        </h2>
        <span>
          <Status value={tool.connector} />{' '}
          {drifting.length > 0 && (
            <span class="status status-changed">{counted(drifting.length, 'definition')} to review</span>
          )}
        </span>
      </header>
      <dl class="facts">
        {url && (
          <>
            <dt>URL</dt>
            <dd>
              <code>{url}</code>
            </dd>
          </>
        )}
        {upstreamTool && (
          <>
            <dt>Upstream tool</dt>
            <dd>
              <code>{upstreamTool}</code> only
            </dd>
          </>
        )}
        {mcp && (
          <>
            <dt>Definitions read</dt>
            <dd>{tool.definitions_checked_at ? <Time value={tool.definitions_checked_at} /> : 'not yet'}</dd>
          </>
        )}
      </dl>
      {auth?.type === 'oauth' && (
        <ToolConnections
          orgId={orgId}
          toolId={tool.tool_id}
          user={props.user}
          scope={auth.connection === 'user' ? 'user' : 'org'}
        />
      )}
      {tool.definitions_error && (
        <p class="error">
          The last read failed, and the pins stay as they were:{' '}
          <span class="upstream-text">{tool.definitions_error}</span>
        </p>
      )}
      {mcp && (
        <>
          <div class="buttons">
            <button type="button" disabled={action.busy} onClick={() => void refresh()}>
              Refresh
            </button>
            {drifting.length > 1 && (
              <AcceptAll definitions={drifting} actionType={tool.action_type} busy={action.busy} onAccept={acceptAll} />
            )}
          </div>
          <Outcome error={action.error} notice={action.notice} />
          <Definitions tool={tool} onAccept={accept} onChanged={onChanged} />
        </>
      )}
    </article>
  );
}

/**
 * Accepts every definition on screen, each with the hash shown (not the API's accept-all, which
 * takes whatever the upstream has by then): what was not reviewed is not accepted.
 */
function AcceptAll(props: {
  definitions: Definition[];
  actionType: string;
  busy: boolean;
  onAccept: (definitions: Acceptance[]) => Promise<unknown>;
}) {
  const reviewed = useRef<Acceptance[]>([]);
  return (
    <ConfirmButton
      label={`Accept all ${props.definitions.length}`}
      confirmLabel="Yes, accept all"
      question={`Accept all definitions of ${props.actionType}?`}
      tone="primary"
      busy={props.busy}
      onAsk={() => (reviewed.current = props.definitions.map(acceptanceOf))}
      onConfirm={() => props.onAccept(reviewed.current)}
    >
      Accept the {props.definitions.length} definitions shown above? Agents’ MCP clients see them, and calls of them go
      to the upstream again.
    </ConfirmButton>
  );
}

const acceptanceOf = (definition: Definition): Acceptance => ({
  name: definition.name,
  current_hash: definition.current_hash,
});

type Accept = (definitions: Acceptance[]) => Promise<string>;

function Definitions({ tool, onAccept, onChanged }: { tool: Tool; onAccept: Accept; onChanged: () => Promise<void> }) {
  if (tool.definitions.length === 0) {
    return (
      <p class="muted">
        {tool.definitions_checked_at ? 'No upstream definitions are kept.' : 'The upstream was not read yet.'}
      </p>
    );
  }
  return (
    <>
      <h3>Upstream definitions</h3>
      <ul class="definitions">
        {forReview(tool.definitions).map((definition) => (
          <li key={definition.name}>
            <DefinitionItem definition={definition} onAccept={onAccept} onChanged={onChanged} />
          </li>
        ))}
      </ul>
    </>
  );
}

/** What a status means for the agents' calls. */
const CONSEQUENCE: Record<string, string> = {
  changed:
    'The upstream shows another definition than the pinned one: calls are denied (TOOL_DEFINITION_CHANGED) until it is accepted.',
  new: 'The upstream lists a tool that was never accepted: calls are denied (TOOL_DEFINITION_CHANGED) until it is.',
  removed: 'The upstream no longer lists this tool: calls are denied (TOOL_NOT_FOUND_UPSTREAM). Accepting forgets it.',
};

function DefinitionItem({
  definition,
  onAccept,
  onChanged,
}: {
  definition: Definition;
  onAccept: Accept;
  onChanged: () => Promise<void>;
}) {
  const action = useNoticedAction(onChanged);
  const reviewed = useRef<Acceptance>(acceptanceOf(definition));
  const group = useRef<HTMLDivElement>(null);
  const review = needsReview(definition);
  const accept = () =>
    action.run(async () => {
      const done = await onAccept([reviewed.current]);
      // Its buttons are about to go: the focus stays with the definition, not the top of the page.
      group.current?.focus();
      return done;
    });
  return (
    <div
      class="definition"
      role="group"
      aria-label={`Definition ${definition.name}`}
      data-definition={definition.name}
      ref={group}
      tabIndex={-1}
    >
      <p class="definition-name">
        <code class="upstream-text">{escapeHiddenCharacters(definition.name)}</code>{' '}
        <Status value={definition.status} />
      </p>
      <dl class="facts">
        <dt>Pinned</dt>
        <dd>
          {definition.pinned_hash ? (
            <HashAt hash={definition.pinned_hash} at={definition.pinned_at} />
          ) : (
            'never accepted'
          )}
        </dd>
        {review && (
          <>
            <dt>Upstream now</dt>
            <dd>
              {definition.current_hash ? (
                <HashAt hash={definition.current_hash} at={definition.changed_at} since />
              ) : (
                'not listed'
              )}
            </dd>
          </>
        )}
      </dl>
      {review && <p>{CONSEQUENCE[definition.status]}</p>}
      {definition.diff && <Diff text={definition.diff} />}
      {!review && definition.pinned != null && (
        <details>
          <summary>Pinned definition</summary>
          <pre class="json">{escapeHiddenCharacters(JSON.stringify(definition.pinned, null, 2))}</pre>
        </details>
      )}
      {review && (
        <div class="buttons">
          <ConfirmButton
            label="Accept"
            confirmLabel="Yes, accept"
            question={`Accept ${definition.name}?`}
            tone="primary"
            busy={action.busy}
            onAsk={() => (reviewed.current = acceptanceOf(definition))}
            onConfirm={accept}
          >
            {definition.status === 'removed'
              ? `Forget ${definition.name}? It is no longer listed upstream.`
              : `Accept ${definition.name} as the diff shows it? Agents’ MCP clients see this definition, and calls of it go to the upstream again.`}
          </ConfirmButton>
        </div>
      )}
      <Outcome error={action.error} notice={action.notice} />
    </div>
  );
}

function HashAt({ hash, at, since }: { hash: string; at: string | null; since?: boolean }) {
  return (
    <>
      <code title={hash}>{shortHash(hash)}</code>
      {at && (
        <>
          {' '}
          {since ? 'since ' : ''}
          <Time value={at} />
        </>
      )}
    </>
  );
}

export type DiffLineKind = 'header' | 'hunk' | 'added' | 'removed' | 'context';

/**
 * The lines of a unified diff, each with what it is: the file header until the first hunk (`---`
 * and `+++` there name the two sides, they are not changes), then by its first character. The
 * header's rule of `=` says nothing the layout does not.
 */
export function diffLines(text: string): { kind: DiffLineKind; text: string }[] {
  let inHunk = false;
  return text
    .replace(/\n$/, '')
    .split('\n')
    .filter((line) => !/^=+$/.test(line))
    .map((line) => {
      if (line.startsWith('@@')) inHunk = true;
      return { kind: inHunk ? lineKind(line) : 'header', text: line };
    });
}

function lineKind(line: string): DiffLineKind {
  if (line.startsWith('@@')) return 'hunk';
  if (line.startsWith('+')) return 'added';
  if (line.startsWith('-')) return 'removed';
  return 'context';
}

/**
 * The diff as text: added lines in `ins`, removed ones in `del` (which screen readers name), each
 * still with its `+` or `-`, so neither colour nor element alone carries the meaning.
 */
function Diff({ text }: { text: string }) {
  return (
    <figure class="diff">
      <figcaption>From the pinned definition (−) to the upstream’s (+)</figcaption>
      <pre>
        {diffLines(text).map((line) =>
          line.kind === 'added' ? (
            <ins>{line.text}</ins>
          ) : line.kind === 'removed' ? (
            <del>{line.text}</del>
          ) : (
            <span class={`diff-${line.kind}`}>{line.text}</span>
          ),
        )}
      </pre>
    </figure>
  );
}
