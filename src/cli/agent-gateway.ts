#!/usr/bin/env node
/**
 * The agent-gateway command line. `verify <file>` checks a records export
 * (GET /api/v1/records/export) offline: no server, no database, only this package.
 * `rotate-keys` makes new signing keys in the service's database (DATABASE_URL or DATA_DIR);
 * `reencrypt` seals every secret at rest with the current KEY_ENCRYPTION_KEY.
 *
 * Exit status: 0 verified, 1 the file does not verify (the first broken record is named),
 * 2 usage or I/O error.
 */
import { open, readFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import type { JWK } from 'jose';
import { verifyExport, type VerifyResult } from '../modules/record/record-export.js';

const usage = `Usage: agent-gateway verify <export.jsonl> [--jwks <jwks.json>] [--verifier-key <key>]…
       agent-gateway verify-proof <record.json> <proof.json> <checkpoint.txt> --verifier-key <key>…
       agent-gateway rotate-keys [record|capability|session|oauth|checkpoint|all]
       agent-gateway reencrypt

Verifies a records export of Agent Gateway (GET /api/v1/records/export) offline: the signed
header, every record's hash (RFC 8785 canonical JSON, SHA-256) and Ed25519 signature, the params
hash, every link of the chain, the count, and the chain head when the file reaches it.

  <export.jsonl>      the export; "-" reads standard input
  --jwks <file>       trust only these keys (e.g. saved from the service's /.well-known/jwks.json)
                      instead of the JWKS the file carries
  --verifier-key <k>  trust only this checkpoint key (GET /api/v1/records/checkpoint/verifier)
                      instead of the one the file carries; may be given more than once

The export carries the org's latest signed checkpoint; verify checks its signature and rebuilds its
Merkle root (RFC 9162) from the file's records up to its tree size.

verify-proof checks one record offline: a record line of an export, the inclusion proof of
GET /api/v1/records/{id}/proof and the checkpoint of GET /api/v1/records/checkpoint, against a
checkpoint verifier key: the checkpoint's signature, the record's hash, and that the proof puts
the record in the checkpoint's tree.

Exit status: 0 verified, 1 not verified (the first broken record is printed), 2 usage or I/O error.

rotate-keys makes a new active Ed25519 key for each purpose named (default: all) in the database of
DATABASE_URL (or the PGlite DATA_DIR, which it refuses while a service runs on it: PGlite allows one
process) and retires the old ones, which keep verifying and stay in the JWKS. Running services switch
to the new keys within a second.

reencrypt seals every secret at rest (signing keys, tool secrets and header values, webhook and
single sign-on client secrets) that is not yet sealed with KEY_ENCRYPTION_KEY: plaintext ones and
those sealed with a key of KEY_ENCRYPTION_KEY_PREVIOUS, in one transaction, in the same database
(for PGlite, with the service stopped). Run it after setting a key for the first time, and after rotating it (then drop
KEY_ENCRYPTION_KEY_PREVIOUS).`;

class UsageError extends Error {}

function parseArgs(args: string[]): { file: string; jwks?: string; verifierKeys?: string[] } {
  let file: string | undefined;
  let jwks: string | undefined;
  const { rest, verifierKeys } = verifierKeyArgs(args);
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i];
    if (arg === '--jwks') {
      jwks = rest[++i];
      if (!jwks) throw new UsageError('--jwks needs a file');
    } else if (arg.startsWith('--jwks=')) {
      jwks = arg.slice('--jwks='.length);
    } else if (arg.startsWith('-') && arg !== '-') {
      throw new UsageError(`unknown option ${arg}`);
    } else if (file === undefined) {
      file = arg;
    } else {
      throw new UsageError(`unexpected argument ${arg}`);
    }
  }
  if (!file) throw new UsageError('verify needs the export file');
  return { file, jwks, verifierKeys: verifierKeys.length ? verifierKeys : undefined };
}

/** The --verifier-key values, and the other arguments. */
function verifierKeyArgs(args: string[]): { rest: string[]; verifierKeys: string[] } {
  const rest: string[] = [];
  const verifierKeys: string[] = [];
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '--verifier-key') {
      const key = args[++i];
      if (!key) throw new UsageError('--verifier-key needs a key');
      verifierKeys.push(key);
    } else if (args[i].startsWith('--verifier-key=')) verifierKeys.push(args[i].slice('--verifier-key='.length));
    else rest.push(args[i]);
  }
  return { rest, verifierKeys };
}

async function trustedKeys(path: string): Promise<JWK[]> {
  const parsed = JSON.parse(await readFile(path, 'utf8')) as { keys?: unknown };
  if (!Array.isArray(parsed.keys)) throw new Error(`${path} is not a JWKS ({"keys": [...]})`);
  return parsed.keys as JWK[];
}

function describe(result: Extract<VerifyResult, { ok: true }>): string {
  if (result.count === 0) {
    return `OK: the export of org ${result.orgId} holds no records (chain head at export: seq ${result.chainHead.seq})`;
  }
  const start = result.fromGenesis
    ? 'starts at the genesis hash'
    : `starts at seq ${result.firstSeq} (its link to seq ${result.firstSeq! - 1} lies outside the file)`;
  const end = result.reachesHead
    ? `ends at the chain head at export time (seq ${result.chainHead.seq}, ${result.chainHead.head_hash})`
    : `ends at seq ${result.lastSeq}; the chain head at export time was seq ${result.chainHead.seq}`;
  return [
    `OK: ${result.count} record${result.count === 1 ? '' : 's'} of org ${result.orgId} verified`,
    `  range: seq ${result.firstSeq}..${result.lastSeq}, created ${result.firstCreatedAt} .. ${result.lastCreatedAt}`,
    `  keys:  ${result.keyIds.join(', ')}`,
    `  chain: ${start}; ${end}`,
    `  checkpoint: ${
      result.checkpoint
        ? `tree size ${result.checkpoint.treeSize} of ${result.checkpoint.origin}, its root rebuilt from the file ` +
          `(${result.checkpoint.covered} of its records in the file, ${result.checkpoint.after} after it); ` +
          `signed by ${result.checkpoint.pinned ? 'a key you gave' : 'the key the file carries'}`
        : 'none in the file'
    }`,
    `  policies: ${result.policyMatches} record${result.policyMatches === 1 ? '' : 's'} with matched policies; ` +
      `${result.beforePolicies} from before policies (no list)`,
    `  channels: ${Object.entries(result.channels)
      .filter(([, n]) => n > 0)
      .map(([channel, n]) => `${channel === 'none' ? 'from before channels' : channel} ${n}`)
      .join(', ')}`,
  ].join('\n');
}

async function verify(args: string[]): Promise<number> {
  const { file, jwks, verifierKeys } = parseArgs(args);
  const keys = jwks ? await trustedKeys(jwks) : undefined;
  const input = file === '-' ? process.stdin : (await open(file)).createReadStream();
  const lines = createInterface({ input, crlfDelay: Infinity });
  const result = await verifyExport(lines, { trustedKeys: keys, trustedVerifierKeys: verifierKeys });
  if (result.ok) {
    process.stdout.write(`${describe(result)}\n`);
    return 0;
  }
  const record =
    result.seq !== undefined ? `, record seq ${result.seq}${result.recordId ? ` (${result.recordId})` : ''}` : '';
  process.stderr.write(`FAILED: line ${result.line}${record}: ${result.reason}\n`);
  return 1;
}

async function verifyProof(args: string[]): Promise<number> {
  const { rest, verifierKeys } = verifierKeyArgs(args);
  if (rest.length !== 3) throw new UsageError('verify-proof needs the record, proof and checkpoint files');
  if (!verifierKeys.length) throw new UsageError('verify-proof needs --verifier-key');
  const [record, proof, checkpoint] = await Promise.all(rest.map((path) => readFile(path, 'utf8')));
  const json = (text: string, what: string) => {
    try {
      return JSON.parse(text);
    } catch {
      throw new UsageError(`${what} is not JSON`);
    }
  };
  const { verifyRecordProof } = await import('../modules/record/record-proof-check.js');
  const result = verifyRecordProof({
    record: json(record, rest[0]),
    proof: json(proof, rest[1]),
    checkpoint,
    verifierKeys,
  });
  if (!result.ok) {
    process.stderr.write(`FAILED: ${result.reason}\n`);
    return 1;
  }
  process.stdout.write(
    `OK: record ${result.recordId} (seq ${result.seq}) is in the tree of ${result.treeSize} records of ${result.origin}, signed by the verifier key\n`,
  );
  return 0;
}

const purposes = ['record', 'capability', 'session', 'oauth', 'checkpoint'] as const;

async function rotateKeys(args: string[]): Promise<number> {
  if (args.length > 1 || (args[0] && args[0] !== 'all' && !purposes.includes(args[0] as never))) {
    throw new UsageError(`rotate-keys takes one of ${purposes.join(', ')} or all`);
  }
  const chosen = !args[0] || args[0] === 'all' ? purposes : [args[0] as (typeof purposes)[number]];
  const { SigningKeyStore } = await import('../lib/signing-keys.js');
  const { db, secrets } = await openServiceDatabase();
  try {
    const keys = new SigningKeyStore(db.sql, secrets);
    for (const purpose of chosen) {
      const key = await keys.rotate(purpose);
      process.stdout.write(`${purpose}: new active key ${key.kid}\n`);
    }
  } finally {
    await db.close();
  }
  return 0;
}

async function reencrypt(args: string[]): Promise<number> {
  if (args.length) throw new UsageError('reencrypt takes no arguments');
  const { reencryptSecrets } = await import('./reencrypt.js');
  const { db, secrets } = await openServiceDatabase();
  try {
    if (!secrets.encrypting) throw new UsageError('reencrypt needs KEY_ENCRYPTION_KEY (the key to seal with)');
    const counts = await reencryptSecrets(db.sql, secrets);
    process.stdout.write(
      `sealed with key ${secrets.currentKeyId}: ${counts.signingKeys} signing keys, ${counts.tools} tools, ${counts.webhooks} webhooks, ${counts.ssoClientSecrets} single sign-on client secrets rewritten\n`,
    );
  } finally {
    await db.close();
  }
  return 0;
}

/** The service's database and secret box, from its environment (DATABASE_URL or DATA_DIR, KEY_ENCRYPTION_KEY…). */
async function openServiceDatabase() {
  // Loaded here, so that `verify` needs neither a database driver nor the service's configuration.
  const [{ parseEnv, databaseOptions }, { openDatabase }, { SecretBox }] = await Promise.all([
    import('../env.js'),
    import('../db/database.js'),
    import('../lib/secret-box.js'),
  ]);
  const env = parseEnv();
  const db = await openDatabase(databaseOptions(env));
  return { db, secrets: new SecretBox(env.keyEncryptionKey, env.keyEncryptionKeyPrevious) };
}

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    if (command === 'verify') return await verify(rest);
    if (command === 'verify-proof') return await verifyProof(rest);
    if (command === 'rotate-keys') return await rotateKeys(rest);
    if (command === 'reencrypt') return await reencrypt(rest);
    if (command === undefined || command === 'help' || command === '--help' || command === '-h') {
      process.stdout.write(`${usage}\n`);
      return command === undefined ? 2 : 0;
    }
    throw new UsageError(`unknown command ${command}`);
  } catch (error) {
    if (error instanceof UsageError) {
      process.stderr.write(`agent-gateway: ${error.message}\n\n${usage}\n`);
    } else {
      process.stderr.write(`agent-gateway: ${error instanceof Error ? error.message : String(error)}\n`);
    }
    return 2;
  }
}

process.exitCode = await main(process.argv.slice(2));
