#!/usr/bin/env node
/**
 * The agent-gateway command line. `verify <file>` checks a records export
 * (GET /api/v1/records/export) offline: no server, no database, only this package.
 * `rotate-keys` makes new signing keys in the service's database (DATABASE_URL or DATA_DIR);
 * `reencrypt` seals every secret at rest with the current KEY_ENCRYPTION_KEY; `create-org` makes an
 * organization and its admin there, through the org module's service, whatever SIGNUP says.
 * Every command answers `--help`.
 *
 * Exit status: 0 verified (done), 1 the file does not verify (the first broken record is named;
 * create-org: the slug or email is taken), 2 usage or I/O error.
 */
import { open, readFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import type { JWK } from 'jose';
import type { AppError } from '../errors.js';
import { verifyExport, type VerifyResult } from '../modules/record/record-export.js';

const VERIFY_EXIT =
  'Exit status: 0 verified, 1 not verified (the first broken record is printed), 2 usage or I/O error.';
const DATABASE_EXIT =
  'Exit status: 0 done, 2 usage error, or a database that cannot be opened (a PGlite DATA_DIR a service holds).';

/** Each command's usage: its synopsis (after `agent-gateway `), what it does and its exit statuses. */
const commandUsage = {
  verify: {
    synopsis: 'verify <export.jsonl> [--jwks <jwks.json>] [--verifier-key <key>]…',
    text: `Verifies a records export of Agent Gateway (GET /api/v1/records/export) offline: the signed
header, every record's hash (RFC 8785 canonical JSON, SHA-256) and Ed25519 signature, the params
hash, every link of the chain, the count, and the chain head when the file reaches it.

  <export.jsonl>      the export; "-" reads standard input
  --jwks <file>       trust only these keys (e.g. saved from the service's /.well-known/jwks.json)
                      instead of the JWKS the file carries
  --verifier-key <k>  trust only this checkpoint key (GET /api/v1/records/checkpoint/verifier)
                      instead of the one the file carries; may be given more than once

The export carries the org's latest signed checkpoint; verify checks its signature and rebuilds its
Merkle root (RFC 9162) from the file's records up to its tree size.`,
    exit: VERIFY_EXIT,
  },
  'verify-proof': {
    synopsis: 'verify-proof <record.json> <proof.json> <checkpoint.txt> --verifier-key <key>…',
    text: `verify-proof checks one record offline: a record line of an export, the inclusion proof of
GET /api/v1/records/{id}/proof and the checkpoint of GET /api/v1/records/checkpoint, against a
checkpoint verifier key: the checkpoint's signature, the record's hash, and that the proof puts
the record in the checkpoint's tree.`,
    exit: VERIFY_EXIT,
  },
  'rotate-keys': {
    synopsis: 'rotate-keys [record|capability|session|oauth|checkpoint|all]',
    text: `rotate-keys makes a new active Ed25519 key for each purpose named (default: all) in the database of
DATABASE_URL (or the PGlite DATA_DIR, which it refuses while a service runs on it: PGlite allows one
process) and retires the old ones, which keep verifying and stay in the JWKS. Running services switch
to the new keys within a second.`,
    exit: DATABASE_EXIT,
  },
  reencrypt: {
    synopsis: 'reencrypt',
    text: `reencrypt seals every secret at rest (signing keys, tool secrets and header values, webhook and
single sign-on client secrets, tool connections' tokens) that is not yet sealed with KEY_ENCRYPTION_KEY: plaintext ones and
those sealed with a key of KEY_ENCRYPTION_KEY_PREVIOUS, in one transaction, in the same database
(for PGlite, with the service stopped). Run it after setting a key for the first time, and after rotating it (then drop
KEY_ENCRYPTION_KEY_PREVIOUS).`,
    exit: DATABASE_EXIT,
  },
  'create-org': {
    synopsis: 'create-org --name <name> --slug <slug> --admin-email <email>',
    text: `create-org creates an organization and its first user, an admin, in the database of DATABASE_URL
(or the PGlite DATA_DIR, with the service stopped), migrating it first, as a sign-up through the API
would, whether SIGNUP is open or closed. It prints the organization's id. The admin's password is
AGENT_GATEWAY_ADMIN_PASSWORD, else asked for on the terminal (not shown, asked twice), else the
first line of standard input. Name, slug, email and password follow the API's rules.`,
    exit: 'Exit status: 0 created, 1 the slug or the email is taken, 2 usage error, invalid input or a database error.',
  },
} as const;

type Command = keyof typeof commandUsage;
const isCommand = (name: string | undefined): name is Command =>
  name !== undefined && Object.hasOwn(commandUsage, name);

const usage = `Usage: ${Object.values(commandUsage)
  .map(({ synopsis }) => `agent-gateway ${synopsis}`)
  .join('\n       ')}
       agent-gateway <command> --help

${commandUsage.verify.text}

${commandUsage['verify-proof'].text}

${VERIFY_EXIT}

${commandUsage['rotate-keys'].text}

${commandUsage.reencrypt.text}

${commandUsage['create-org'].text}
${commandUsage['create-org'].exit}`;

/** `agent-gateway <command> --help`: the command's synopsis, what it does, its exit statuses. */
function usageOf(command: Command): string {
  const { synopsis, text, exit } = commandUsage[command];
  return `Usage: agent-gateway ${synopsis}\n\n${text}\n\n${exit}`;
}

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
    `  connections: ${result.connections} record${result.connections === 1 ? '' : 's'} naming the OAuth connection of the call`,
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
      `sealed with key ${secrets.currentKeyId}: ${counts.signingKeys} signing keys, ${counts.tools} tools, ${counts.webhooks} webhooks, ${counts.ssoClientSecrets} single sign-on client secrets, ${counts.toolConnections} tool connection rows rewritten\n`,
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
  return { env, db, secrets: new SecretBox(env.keyEncryptionKey, env.keyEncryptionKeyPrevious) };
}

const createOrgFlags = { '--name': 'name', '--slug': 'slug', '--admin-email': 'admin_email' } as const;
type CreateOrgFlag = keyof typeof createOrgFlags;
type CreateOrgField = (typeof createOrgFlags)[CreateOrgFlag];
const isCreateOrgFlag = (arg: string | undefined): arg is CreateOrgFlag =>
  arg !== undefined && Object.hasOwn(createOrgFlags, arg);
/** How the command line names a field the org service names (its input checks and conflicts). */
const flagOfField: Record<string, string> = {
  name: '--name',
  slug: '--slug',
  admin_email: '--admin-email',
  admin_password: 'the password',
};

/** `--name <v>` or `--name=<v>`, each flag once, all three. */
function parseCreateOrgArgs(args: string[]): Record<CreateOrgField, string> {
  const values: Partial<Record<CreateOrgField, string>> = {};
  for (let i = 0; i < args.length; i++) {
    const equals = args[i].startsWith('--') ? args[i].indexOf('=') : -1;
    const flag = equals > 0 ? args[i].slice(0, equals) : args[i];
    if (!isCreateOrgFlag(flag)) {
      throw new UsageError(flag.startsWith('-') ? `unknown option ${flag}` : `unexpected argument ${flag}`);
    }
    // A flag right after a flag is a forgotten value, not a name that starts with dashes.
    const value = equals > 0 ? args[i].slice(equals + 1) : isCreateOrgFlag(args[i + 1]) ? undefined : args[++i];
    if (value === undefined) throw new UsageError(`${flag} needs a value`);
    if (values[createOrgFlags[flag]] !== undefined) throw new UsageError(`${flag} is given twice`);
    values[createOrgFlags[flag]] = value;
  }
  const missing = (Object.keys(createOrgFlags) as CreateOrgFlag[]).filter(
    (f) => values[createOrgFlags[f]] === undefined,
  );
  if (missing.length) throw new UsageError(`create-org needs ${missing.join(', ')}`);
  return values as Record<CreateOrgField, string>;
}

/** The first line of `input` without its line break; empty when the input ends before any. */
async function firstLine(input: NodeJS.ReadableStream): Promise<string> {
  const lines = createInterface({ input, crlfDelay: Infinity });
  // Leaving the loop closes the interface: the rest of the input is not read.
  for await (const line of lines) return line;
  return '';
}

/**
 * Asks on the terminal with echo off (raw mode: each key reaches us, none is shown). Enter ends the
 * answer, Backspace takes back a character; Ctrl-C interrupts the command as it would anywhere.
 */
function askHidden(question: string): Promise<string> {
  const terminal = process.stdin;
  return new Promise((resolve) => {
    let typed: string[] = [];
    const finish = () => {
      terminal.off('data', onKeys);
      terminal.setRawMode(false);
      terminal.pause();
      process.stderr.write('\n');
    };
    const onKeys = (keys: string) => {
      for (const key of keys) {
        if (key === '\r' || key === '\n' || key === '\u0004') {
          finish();
          return resolve(typed.join(''));
        }
        if (key === '\u0003') {
          finish();
          process.kill(process.pid, 'SIGINT');
          return;
        }
        if (key === '\u007f' || key === '\b') typed = typed.slice(0, -1);
        else if (key >= ' ') typed.push(key);
      }
    };
    // Echo goes off before the question shows: whoever answers as soon as they see it (a fast typist,
    // a paste, a script) would otherwise have the first keys echoed. The question goes to stderr:
    // stdout is the org id alone.
    terminal.setEncoding('utf8');
    terminal.setRawMode(true);
    terminal.on('data', onKeys);
    terminal.resume();
    process.stderr.write(question);
  });
}

/**
 * The admin's password: AGENT_GATEWAY_ADMIN_PASSWORD; else, on a terminal, asked twice without
 * echo (a mistyped password nobody saw would lock the admin out); else one line of standard input.
 */
async function adminPassword(email: string): Promise<string> {
  const fromEnvironment = process.env.AGENT_GATEWAY_ADMIN_PASSWORD;
  if (fromEnvironment) return fromEnvironment;
  if (!process.stdin.isTTY) return firstLine(process.stdin);
  const password = await askHidden(`Password for ${email}: `);
  if ((await askHidden('The same password again: ')) !== password) throw new UsageError('the two passwords differ');
  return password;
}

/** The service's refusal in the command line's words: the flag it is about. */
function refusal(error: AppError): string {
  const fields = (error.details.errors as { field: string; message: string }[] | undefined) ?? [];
  if (fields.length) return fields.map((e) => `${flagOfField[e.field] ?? e.field} ${e.message}`).join('; ');
  const field = error.details.field as string | undefined;
  return field ? `${error.message} (${flagOfField[field] ?? field})` : error.message;
}

async function createOrg(args: string[]): Promise<number> {
  const flags = parseCreateOrgArgs(args);
  const input = { ...flags, admin_password: await adminPassword(flags.admin_email.trim()) };
  const [{ checkNewOrganization }, { AppError }] = await Promise.all([
    import('../modules/org/org.service.js'),
    import('../errors.js'),
  ]);
  try {
    // The API's input checks, before a database is opened (or a DATA_DIR created) for input they refuse.
    checkNewOrganization(input);
    const { createOrganization } = await import('./create-org.js');
    const { db, secrets, env } = await openServiceDatabase();
    try {
      process.stdout.write(`${await createOrganization({ env, db, secrets }, input)}\n`);
    } finally {
      await db.close();
    }
    return 0;
  } catch (error) {
    if (!(error instanceof AppError)) throw error;
    if (error.code === 'VALIDATION_ERROR') throw new UsageError(refusal(error));
    if (error.code !== 'CONFLICT') throw error;
    process.stderr.write(`agent-gateway: ${refusal(error)}\n`);
    return 1;
  }
}

const run: Record<Command, (args: string[]) => Promise<number>> = {
  verify,
  'verify-proof': verifyProof,
  'rotate-keys': rotateKeys,
  reencrypt,
  'create-org': createOrg,
};

const isHelp = (arg: string | undefined) => arg === 'help' || arg === '--help' || arg === '-h';

/**
 * The usage asked for, if any: `--help` or `-h` among a command's arguments, or `help [<command>]`
 * (also `--help [<command>]`); it goes to stdout with exit 0.
 */
function helpAsked(command: string | undefined, rest: string[]): string | undefined {
  if (isCommand(command)) return rest.some((arg) => arg === '--help' || arg === '-h') ? usageOf(command) : undefined;
  if (!isHelp(command)) return undefined;
  if (rest.length === 0) return usage;
  if (rest.length === 1 && isCommand(rest[0])) return usageOf(rest[0]);
  throw new UsageError(rest.length === 1 ? `unknown command ${rest[0]}` : `${command} takes at most one command`);
}

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    const help = helpAsked(command, rest);
    if (help !== undefined) {
      process.stdout.write(`${help}\n`);
      return 0;
    }
    if (isCommand(command)) return await run[command](rest);
    if (command === undefined) {
      process.stdout.write(`${usage}\n`);
      return 2;
    }
    throw new UsageError(`unknown command ${command}`);
  } catch (error) {
    if (error instanceof UsageError) {
      // A command's mistake shows that command's usage; anything else the whole of it.
      process.stderr.write(`agent-gateway: ${error.message}\n\n${isCommand(command) ? usageOf(command) : usage}\n`);
    } else {
      process.stderr.write(`agent-gateway: ${error instanceof Error ? error.message : String(error)}\n`);
    }
    return 2;
  }
}

process.exitCode = await main(process.argv.slice(2));
