import type { PrivateNetworks } from '../../lib/address-policy.js';
import { sendOutbound } from '../../lib/outbound-http.js';
import { acceptRegistration, isLoopbackHost, isRegistrationError, type ClientRegistration } from './oauth-client.js';

/**
 * Client ID Metadata Documents (docs/decisions/0047-mcp-oauth.md): a `client_id` that is an https
 * URL names a JSON document, served by the client, that describes it. It is fetched through the
 * outbound address policy (no private, loopback or reserved address; no redirect followed), with
 * a size and a time cap, must name itself as `client_id`, and is held to the rules of a
 * registration. Answers, and refusals, are kept a while, in a bounded map per process.
 */

export const METADATA_DOCUMENT_MAX_BYTES = 5 * 1024;
export const METADATA_DOCUMENT_TIMEOUT_MS = 3000;
const KEPT_MS = 5 * 60 * 1000;
const REFUSAL_KEPT_MS = 60 * 1000;
const MAX_KEPT = 1000;

export type MetadataDocumentOutcome = { client: ClientRegistration } | { refused: string };

export interface MetadataDocumentOptions {
  /** Tests and local development: http client ids on the loopback interface are fetched too (OAUTH_CLIENT_METADATA_LOOPBACK). */
  allowLoopbackHttp: boolean;
  /** The deployment's OUTBOUND_PRIVATE_NETWORKS: even with `allowLoopbackHttp`, only these private addresses are fetched from. */
  privateNetworks: PrivateNetworks;
  now?: () => number;
}

/** Whether `clientId` names a metadata document (rather than a registered client). */
export function isMetadataDocumentUrl(clientId: string, allowLoopbackHttp: boolean): boolean {
  if (clientId.startsWith('https://')) return true;
  if (!allowLoopbackHttp || !clientId.startsWith('http://')) return false;
  try {
    return isLoopbackHost(new URL(clientId).hostname);
  } catch {
    return false;
  }
}

/** Why `clientId` cannot be a metadata document's URL, before anything is fetched. */
function urlProblem(clientId: string): string | undefined {
  let url: URL;
  try {
    url = new URL(clientId);
  } catch {
    return 'the client_id is not a URL';
  }
  if (/[\u0000-\u001f\u007f]/.test(clientId)) return 'the client_id URL may not contain control characters';
  if (url.hash || url.username || url.password) return 'the client_id URL may not have a fragment or user information';
  if (url.pathname === '/' || url.pathname === '')
    return 'the client_id URL must have a path (the document, not the site)';
  if (clientId.length > 2048) return 'the client_id URL is longer than 2048 characters';
  return undefined;
}

export function createMetadataDocumentResolver({
  allowLoopbackHttp,
  privateNetworks,
  now = Date.now,
}: MetadataDocumentOptions) {
  const kept = new Map<string, { outcome: MetadataDocumentOutcome; until: number }>();

  async function fetchDocument(clientId: string): Promise<MetadataDocumentOutcome> {
    const problem = urlProblem(clientId);
    if (problem) return { refused: problem };
    const outcome = await sendOutbound({
      method: 'GET',
      url: clientId,
      headers: { accept: 'application/json' },
      timeoutMs: METADATA_DOCUMENT_TIMEOUT_MS,
      maxResponseBytes: METADATA_DOCUMENT_MAX_BYTES,
      oversize: 'fail',
      access: { privateNetworks, allowPrivateNetwork: allowLoopbackHttp },
    });
    if (outcome.kind === 'failure')
      return { refused: `the client's metadata document could not be fetched: ${outcome.message}` };
    if (outcome.kind === 'redirect')
      return {
        refused: `the client's metadata document answered a redirect (${outcome.status}), which is not followed`,
      };
    if (outcome.status !== 200) return { refused: `the client's metadata document answered ${outcome.status}` };
    let document: unknown;
    try {
      document = JSON.parse(outcome.body.toString('utf8'));
    } catch {
      return { refused: "the client's metadata document is not JSON" };
    }
    if (
      typeof document !== 'object' ||
      document === null ||
      (document as Record<string, unknown>).client_id !== clientId
    ) {
      return { refused: "the client's metadata document does not name itself as its client_id" };
    }
    const accepted = acceptRegistration(document);
    if (isRegistrationError(accepted))
      return { refused: `the client's metadata document is refused: ${accepted.error_description}` };
    return { client: accepted };
  }

  return {
    /**
     * The client a metadata document describes, or why it is refused; kept 5 minutes (a refusal 1
     * minute). `beforeFetch` runs when the document must be fetched, and may refuse by throwing
     * (the caller's throttle).
     */
    async resolve(clientId: string, beforeFetch?: () => Promise<void>): Promise<MetadataDocumentOutcome> {
      const hit = kept.get(clientId);
      if (hit && hit.until > now()) return hit.outcome;
      await beforeFetch?.();
      const outcome = await fetchDocument(clientId);
      kept.delete(clientId);
      if (kept.size >= MAX_KEPT) kept.delete(kept.keys().next().value!);
      kept.set(clientId, { outcome, until: now() + ('client' in outcome ? KEPT_MS : REFUSAL_KEPT_MS) });
      return outcome;
    },
  };
}
