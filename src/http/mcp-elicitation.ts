import { randomBytes } from 'node:crypto';
import {
  CLIENT_CAPABILITIES_META_KEY,
  inputRequired,
  type InputRequiredResult,
  inputResponse,
  UrlElicitationRequiredError,
} from '@modelcontextprotocol/server';
import type { ElicitationAction } from '../modules/gateway/gateway.service.js';
import type { ConnectRequest } from '../modules/mcp/mcp-tools.js';

/**
 * A call denied because its user has not connected the tool's account, asked of MCP clients that
 * accept URL elicitation as the elicitation of their revision
 * (docs/decisions/0069-connect-by-url-elicitation.md): 2025-11-25's error -32042, 2026-07-28's
 * input-required result. Other clients get the denial as a tool error naming the URL.
 */

/**
 * The 2025 family is served statelessly: a tools/call reaches a server that never saw the
 * client's `initialize`. A client that declared elicitation there gets a session id that says in
 * which modes, which it sends back on every request. It holds no server state (any process reads
 * it) and grants nothing: forging it only changes how a denial is worded, or whether the client is
 * asked a question its own answer settles.
 */
const ELICITATION_SESSION = /^agw-(url|form|form-url)-[A-Za-z0-9_-]{22}$/;

export interface ElicitationModes {
  url: boolean;
  form: boolean;
}

/** The session id remembering the modes a client declared; null when it declared none. */
export function elicitationSessionId({ url, form }: ElicitationModes): string | null {
  const modes = [form && 'form', url && 'url'].filter(Boolean).join('-');
  return modes ? `agw-${modes}-${randomBytes(16).toString('base64url')}` : null;
}

export function sessionElicitation(sessionId: string | null): ElicitationModes {
  const modes = sessionId === null ? undefined : ELICITATION_SESSION.exec(sessionId)?.[1];
  return { url: modes?.endsWith('url') ?? false, form: modes?.startsWith('form') ?? false };
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** Whether client capabilities (`initialize`'s, or a 2026-07-28 envelope's) declare URL-mode elicitation. */
export function declaresUrlElicitation(capabilities: unknown): boolean {
  return isObject(capabilities) && isObject(capabilities.elicitation) && isObject(capabilities.elicitation.url);
}

/** The key of the one input a 2026-07-28 retry answers. */
const CONNECT_INPUT = 'connect_account';
/** The key of a confirmation's input (effect require_confirmation). */
const CONFIRM_INPUT = 'confirm_call';

/** Whether client capabilities declare form-mode elicitation (an empty `elicitation` object is form mode). */
export function declaresFormElicitation(capabilities: unknown): boolean {
  if (!isObject(capabilities) || !isObject(capabilities.elicitation)) return false;
  const { elicitation } = capabilities;
  return isObject(elicitation.form) || (!('url' in elicitation) && !('form' in elicitation));
}

/**
 * Confirmation by the client's user (docs/decisions/0089-confirmation-by-the-agents-user.md), on
 * 2026-07-28: whether this client can be asked, and the answer its retry carries (the question's
 * id comes back as the request state). Accepting means answering the form's `confirm` with true.
 */
export function confirmationOf(ctx: ElicitationContext & { requestState: () => unknown }): {
  canAsk: boolean;
  answer: { id: string; action: 'accept' | 'decline' | 'cancel' } | null;
} {
  const canAsk = declaresFormElicitation(ctx.envelope?.[CLIENT_CAPABILITIES_META_KEY]);
  const view = inputResponse(ctx.inputResponses, CONFIRM_INPUT);
  const id = ctx.requestState();
  if (view.kind !== 'elicit' || typeof id !== 'string') return { canAsk, answer: null };
  return { canAsk, answer: { id, action: actionOf(view) } };
}

/** The question's form: one yes-or-no field; accepting means answering `confirm` with true. */
const confirmationForm = (message: string) => ({
  mode: 'form' as const,
  message,
  requestedSchema: {
    type: 'object' as const,
    properties: { confirm: { type: 'boolean' as const, title: 'Run this call', description: message } },
    required: ['confirm'],
  },
});

/** The user's action in an elicitation result: accepting without a yes declines. */
function actionOf(result: unknown): ElicitationAction {
  if (!isObject(result)) return 'cancel';
  if (result.action === 'accept')
    return isObject(result.content) && result.content.confirm === true ? 'accept' : 'decline';
  return result.action === 'decline' ? 'decline' : 'cancel';
}

/** The question, as 2026-07-28's input-required result. */
export function confirmationElicitation(question: { id: string; message: string }): InputRequiredResult {
  return inputRequired({
    inputRequests: { [CONFIRM_INPUT]: inputRequired.elicit(confirmationForm(question.message)) },
    requestState: question.id,
  });
}

/**
 * 2025-11-25: the question as a server-to-client request on the call's response stream. Its
 * JSON-RPC id names the question, so the process the client posts its response to, whichever it
 * is, knows what it answers.
 */
const CONFIRM_REQUEST_ID = /^agw-confirm:(cnf_[A-Za-z0-9_-]{1,64})$/;

export function confirmationRequest(question: { id: string; message: string }) {
  return {
    jsonrpc: '2.0' as const,
    id: `agw-confirm:${question.id}`,
    method: 'elicitation/create' as const,
    params: confirmationForm(question.message),
  };
}

/**
 * A posted JSON-RPC response to such a request: the question and the user's action (an error
 * response cancels); undefined for any other body.
 */
export function postedConfirmation(body: unknown): { id: string; action: ElicitationAction } | undefined {
  if (!isObject(body) || 'method' in body || typeof body.id !== 'string') return undefined;
  const id = CONFIRM_REQUEST_ID.exec(body.id)?.[1];
  if (id === undefined || !('result' in body || 'error' in body)) return undefined;
  return { id, action: 'error' in body ? 'cancel' : actionOf(body.result) };
}

interface ElicitationContext {
  envelope?: Record<string, unknown>;
  inputResponses?: Record<string, unknown>;
}

/**
 * The elicitation for this request's revision, or undefined when the client takes the tool
 * error instead: it did not declare URL elicitation, or (2026-07-28) it was asked already and
 * retried without the connection made, so it is not asked in a loop.
 */
export function connectElicitation(
  connect: ConnectRequest,
  era: 'older' | 'stateless',
  sessionAccepts: boolean,
  ctx: ElicitationContext,
): InputRequiredResult | undefined {
  const params = { message: connect.message, url: connect.url, elicitationId: connect.elicitationId };
  if (era === 'older') {
    if (sessionAccepts) throw new UrlElicitationRequiredError([{ mode: 'url', ...params }], connect.message);
    return undefined;
  }
  if (!declaresUrlElicitation(ctx.envelope?.[CLIENT_CAPABILITIES_META_KEY])) return undefined;
  if (ctx.inputResponses && CONNECT_INPUT in ctx.inputResponses) return undefined;
  return inputRequired({ inputRequests: { [CONNECT_INPUT]: inputRequired.elicitUrl(params) } });
}
