import { createPublicKey, sign, verify, type KeyObject } from 'node:crypto';
import type { JWK } from 'jose';
import { canonicalJson, canonicalHash } from '../../lib/canonical-json.js';

/**
 * The signed, hash-chained interaction record. What is hashed is the canonical JSON (RFC 8785) of
 * the record without `record_hash` and `signature`; params enter by their hash, so an org that
 * keeps no params still has verifiable records. The signature is Ed25519 over the record hash.
 * Everything here is pure so that the service and an offline verifier check records alike.
 */

export const GENESIS_HASH = `sha256:${'0'.repeat(64)}`;

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
  prev_hash: string;
  created_at: string;
  key_id: string;
}

export const recordHashOf = (body: RecordBody): string => canonicalHash(body);

export function signRecordHash(recordHash: string, privateKey: KeyObject): string {
  return sign(null, Buffer.from(recordHash, 'utf8'), privateKey).toString('base64url');
}

export function verifyRecordSignature(recordHash: string, signature: string, publicKey: KeyObject | JWK): boolean {
  const key = 'kty' in (publicKey as JWK) ? createPublicKey({ key: publicKey as JWK & Record<string, unknown>, format: 'jwk' }) : (publicKey as KeyObject);
  try {
    return verify(null, Buffer.from(recordHash, 'utf8'), key, Buffer.from(signature, 'base64url'));
  } catch {
    return false;
  }
}

export const hashOfJson = (value: unknown): string => canonicalHash(value ?? null);
export { canonicalJson };
