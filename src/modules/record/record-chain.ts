import { createPublicKey, verify, type KeyObject } from 'node:crypto';
import type { JWK } from 'jose';
import { canonicalJson, canonicalHash } from '../../lib/canonical-json.js';
import { signEd25519 } from '../../lib/ed25519.js';

/**
 * The signed, hash-chained interaction record. What is hashed is the canonical JSON (RFC 8785) of
 * the record without `record_hash` and `signature`; params enter by their hash, so an org that
 * keeps no params still has verifiable records. The signature is Ed25519 over the record hash.
 * Everything here is pure so that the service and an offline verifier check records alike.
 */

export const GENESIS_HASH = `sha256:${'0'.repeat(64)}`;

/** A policy that matched the action (docs/guides/policies.md#effects-in-the-decision), as the decision reported it. */
export interface RecordedPolicy {
  policy_id: string;
  name: string;
  version: number;
  effect: string;
  mode: string;
  /** Why its condition failed at run time (the policy then matched); null when it did not fail. */
  condition_error: string | null;
  /** For a rate_limit policy: whether this action was over its limit (a shadow limit only reports it). */
  rate_limit_exceeded: boolean | null;
}

/** A user's confirmation of a call, as its record signs it. */
export interface RecordedConfirmation {
  confirmation_id: string;
  by: string;
}

/** How an agent reached the gateway: REST, GraphQL or MCP (docs/decisions/0025-record-hashing-and-channels.md). */
export const INTERACTION_CHANNELS = ['rest', 'graphql', 'mcp'] as const;
export type InteractionChannel = (typeof INTERACTION_CHANNELS)[number];

/**
 * The OAuth connection the gateway called the tool's upstream through
 * (docs/decisions/0068-upstream-connections.md): its id and, for a user's connection, the user;
 * null for the org's. Records name the connection, never a token.
 */
export interface RecordedConnection {
  connection_id: string;
  user_id: string | null;
}

export interface RecordBody {
  record_id: string;
  org_id: string;
  seq: number;
  svc_id: string;
  agent_id: string;
  action: { type: string; tool: string };
  capability: string;
  params_hash: string;
  decision: 'allow' | 'deny';
  status: 'approved' | 'denied';
  executed: boolean;
  reasons: { code: string; message: string }[];
  result_hash: string | null;
  approval_id: string | null;
  /**
   * The matched policies, in priority order. Every record appended since policies exist has it
   * (an empty list when none matched); records from before do not, and hash as they always did.
   */
  policies?: RecordedPolicy[];
  /** The channel of the call. Records appended before channels were recorded do not have it. */
  channel?: InteractionChannel;
  /**
   * Only on records of calls to a tool that authenticates with an OAuth connection; absent on all
   * others (and on every record from before connections), which therefore hash as they always did.
   */
  connection?: RecordedConnection;
  /** The decision's labels (label policies), sorted; absent when none (and on every older record). */
  labels?: string[];
  /** Only after a redact policy changed the result: the original's hash (`result_hash` is the redacted one's). */
  original_result_hash?: string;
  /** Only after a redaction: what was replaced, by kind. */
  redactions?: { kind: string; count: number }[];
  /** Only on records of calls their user confirmed (require_confirmation): which question, answered by whom. */
  confirmation?: RecordedConfirmation;
  prev_hash: string;
  created_at: string;
  key_id: string;
}

export const recordHashOf = (body: RecordBody): string => canonicalHash(body);

export function signRecordHash(recordHash: string, privateKey: KeyObject): string {
  return signEd25519(Buffer.from(recordHash, 'utf8'), privateKey).toString('base64url');
}

export function verifyRecordSignature(recordHash: string, signature: string, publicKey: KeyObject | JWK): boolean {
  const key =
    'kty' in (publicKey as JWK)
      ? createPublicKey({ key: publicKey as JWK & Record<string, unknown>, format: 'jwk' })
      : (publicKey as KeyObject);
  try {
    return verify(null, Buffer.from(recordHash, 'utf8'), key, Buffer.from(signature, 'base64url'));
  } catch {
    return false;
  }
}

export const hashOfJson = (value: unknown): string => canonicalHash(value ?? null);
export { canonicalJson };
