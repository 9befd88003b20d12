import { randomBytes } from 'node:crypto';
import {
  CLIENT_CAPABILITIES_META_KEY,
  inputRequired,
  type InputRequiredResult,
  inputResponse,
  UrlElicitationRequiredError,
} from '@modelcontextprotocol/server';
import type { ConnectRequest } from '../modules/mcp/mcp-tools.js';

/**
 * A call denied because its user has not connected the tool's account, asked of MCP clients that
 * accept URL elicitation as the elicitation of their revision
 * (docs/decisions/0069-connect-by-url-elicitation.md): 2025-11-25's error -32042, 2026-07-28's
 * input-required result. Other clients get the denial as a tool error naming the URL.
 */

/**
 * The 2025 family is served statelessly: a tools/call reaches a server that never saw the
 * client's `initialize`. A client that declared URL elicitation there gets a session id that
 * says so, which it sends back on every request. It holds no server state (any process reads it)
 * and grants nothing: forging it only changes how a denial is worded.
 */
const URL_ELICITATION_SESSION = /^agw-url-[A-Za-z0-9_-]{22}$/;

export const urlElicitationSessionId = () => `agw-url-${randomBytes(16).toString('base64url')}`;

export const sessionAcceptsUrlElicitation = (sessionId: string | null): boolean =>
  sessionId !== null && URL_ELICITATION_SESSION.test(sessionId);

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
  const confirmed = view.action === 'accept' && view.content?.confirm === true;
  return { canAsk, answer: { id, action: confirmed ? 'accept' : view.action === 'accept' ? 'decline' : view.action } };
}

/** The question, as 2026-07-28's input-required result: a form with one yes-or-no field. */
export function confirmationElicitation(question: { id: string; message: string }): InputRequiredResult {
  return inputRequired({
    inputRequests: {
      [CONFIRM_INPUT]: inputRequired.elicit({
        mode: 'form',
        message: question.message,
        requestedSchema: {
          type: 'object',
          properties: { confirm: { type: 'boolean', title: 'Run this call', description: question.message } },
          required: ['confirm'],
        },
      }),
    },
    requestState: question.id,
  });
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
