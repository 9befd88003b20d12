// How the records and audit listings, and the records' proofs, cost as an org's history grows: two orgs, one with a small
// history and one with a large one (HISTORY_SIZES, default 20000 and 3000000 records and as many
// audit entries), each listing timed in both, and the ratio. `npm run bench:history`, PostgreSQL
// via DATABASE_URL (PGlite works with small sizes). The histories are written with SQL, each
// spread evenly over the same HISTORY_SPAN_DAYS (default 30) up to now, as a busy org's records
// per day grow with its history: an old day of the large org holds 100k records, of the small one
// under 700. HISTORY_SPAN_DAYS=0 writes one record and one audit entry a second instead, so that
// an hour holds as many entries in both orgs and only the history's length differs.
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import pg from 'pg';
import type { AddressInfo } from 'node:net';
import { createApp } from '../src/app.js';
import { openDatabase } from '../src/db/database.js';
import { parseEnv } from '../src/env.js';
import { createLogger } from '../src/logger.js';
import { seedHistory } from '../test/support/history.js';

const SIZES = (process.env.HISTORY_SIZES ?? '20000,3000000').split(',').map(Number);
const REPEAT = Number(process.env.HISTORY_REPEAT ?? 21);
const SPAN_DAYS = Number(process.env.HISTORY_SPAN_DAYS ?? 30);
/** How many seconds the history of an org of `size` spans. */
const spanSeconds = (size: number) => (SPAN_DAYS > 0 ? SPAN_DAYS * 86_400 : size);
const env = parseEnv({ SIGNUP_MAX_PER_ADDRESS: '1000000', ...process.env, LOG_LEVEL: 'silent' });
const db = await openDatabase({ databaseUrl: env.databaseUrl, dataDir: 'memory://' });
const app = createApp({ env, db, logger: createLogger('silent') });
await app.ready;
const server = createServer(app.handler);
const listen = (s: Server) =>
  new Promise<number>((resolve) => s.listen(0, '127.0.0.1', () => resolve((s.address() as AddressInfo).port)));
const base = `http://127.0.0.1:${await listen(server)}`;

async function post(path: string, body: unknown, headers: Record<string, string> = {}) {
  const response = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return (await response.json()) as any;
}

/**
 * An org with `size` records and `size` audit entries, one a second up to now; with
 * HISTORY_REUSE=1, one a previous run wrote on this database (its newest entries then as old as
 * that run).
 */
async function orgWithHistory(size: number) {
  const [previous] = process.env.HISTORY_REUSE
    ? await db.sql.query<{ id: string; slug: string }>(
        `SELECT o.id, o.slug FROM organizations o JOIN record_chain_heads h ON h.org_id = o.id
         WHERE o.slug LIKE $1 AND h.seq = $2 ORDER BY o.created_at DESC LIMIT 1`,
        [`history-${size}-d${SPAN_DAYS}-%`, size],
      )
    : [];
  const slug = previous?.slug ?? `history-${size}-d${SPAN_DAYS}-${Date.now()}`;
  const org = previous
    ? { org_id: previous.id }
    : await post('/api/v1/orgs', {
        name: `History ${size}`,
        slug,
        admin_email: `a@${slug}.example`,
        admin_password: 'benchmark password',
      });
  const { access_token: token } = await post('/api/v1/auth/login', {
    email: `a@${slug}.example`,
    password: 'benchmark password',
  });
  const auth = { authorization: `Bearer ${token}` };
  await fetch(`${base}/api/v1/orgs/${org.org_id}`, {
    method: 'PATCH',
    headers: { 'content-type': 'application/json', ...auth },
    body: JSON.stringify({ operator_rate_limit_per_minute: 1_000_000 }),
  });
  if (previous) return { orgId: org.org_id as string, auth, size };
  const started = performance.now();
  // Its own connection on PostgreSQL: the service's pool ends statements that run as long as these.
  const client = env.databaseUrl ? new pg.Client({ connectionString: env.databaseUrl }) : undefined;
  await client?.connect();
  const seed = (text: string, values: unknown[]) => (client ? client.query(text, values) : db.sql.query(text, values));
  await seedHistory(seed, org.org_id, size, { spanSeconds: spanSeconds(size) });
  if (client) {
    // As autovacuum leaves an insert-only table: statistics, and the visibility map that lets a
    // count read an index alone.
    await client.query('VACUUM ANALYZE interaction_records');
    await client.query('VACUUM ANALYZE audit_logs');
    await client.end();
  }
  console.log(
    `org with ${size} records and audit entries written in ${((performance.now() - started) / 1000).toFixed(0)} s`,
  );
  return { orgId: org.org_id as string, auth, size };
}

/** The id seedHistory gives the record of `seq`. */
const seededRecordId = (orgId: string, seq: number) =>
  `int_${createHash('md5').update(`${orgId}${seq}`).digest('hex')}`;

/** The listings, each a path (relative to the org) and how it is reached. */
function listings(org: { orgId: string; size: number }) {
  const hour = 3600_000;
  // An hour and a day from the middle of the history.
  const middle = Date.now() - (spanSeconds(org.size) / 2) * 1000;
  const windowOf = (ms: number) => `from=${new Date(middle).toISOString()}&to=${new Date(middle + ms).toISOString()}`;
  const window = windowOf(hour);
  const day = windowOf(24 * hour);
  const audit = `/api/v1/orgs/${org.orgId}/audit-logs`;
  return [
    ['records, first page', '/api/v1/records'],
    ['records, status=denied', '/api/v1/records?status=denied'],
    ['records, action=email', '/api/v1/records?action=email'],
    ['records, action=email:write', '/api/v1/records?action=email:write'],
    ['records, agent_id', '/api/v1/records?agent_id=agent-7'],
    ['records, an old hour by from/to', `/api/v1/records?${window}`],
    ['records, an old day by from/to', `/api/v1/records?${day}`],
    ['records, an old day by from/to, by agent', `/api/v1/records?${day}&agent_id=agent-7`],
    ['records, the last hour by from', `/api/v1/records?from=${new Date(Date.now() - hour).toISOString()}`],
    ['records, second page by offset', '/api/v1/records?offset=100'],
    ['records, next page by cursor', '/api/v1/records', 'cursor'],
    ['audit, first page', audit],
    ['audit, action', `${audit}?action=policy.updated`],
    ['audit, action family', `${audit}?action=manifest`],
    ['audit, actor id', `${audit}?actor=user-3`],
    ['audit, actor label', `${audit}?actor=User3@history.example`],
    ['audit, target', `${audit}?target_type=manifest&target_id=m-42`],
    ['audit, an old hour by from/to', `${audit}?${window}`],
    ['audit, an old day by from/to', `${audit}?${day}`],
    ['audit, second page by offset', `${audit}?offset=50`],
    ['audit, next page by cursor', audit, 'cursor'],
    // The transparency log: a proof reads O(log n) nodes by the records' (org, seq) index.
    ['record proof, the middle record', `/api/v1/records/${seededRecordId(org.orgId, Math.ceil(org.size / 2))}/proof`],
    ['consistency proof, half to all', `/api/v1/records/consistency?from=${Math.ceil(org.size / 2)}&to=${org.size}`],
  ] as const;
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

/** Median milliseconds of a listing, and what its first page says. */
async function time(path: string, auth: Record<string, string>, follow?: 'cursor') {
  let url = `${base}${path}`;
  let first: any;
  if (follow) {
    first = await (await fetch(url, { headers: auth })).json();
    if (!first.next_cursor) return { ms: Number.NaN, items: 0, total: '(no next_cursor)' };
    url = `${url}${url.includes('?') ? '&' : '?'}cursor=${encodeURIComponent(first.next_cursor)}`;
  }
  const samples: number[] = [];
  let body: any;
  for (let i = 0; i < REPEAT; i++) {
    const started = performance.now();
    const response = await fetch(url, { headers: auth });
    body = await response.json();
    samples.push(performance.now() - started);
    if (response.status !== 200) throw new Error(`${path}: ${response.status} ${JSON.stringify(body)}`);
  }
  return {
    ms: median(samples),
    items: body.items?.length ?? body.hashes.length,
    total: body.items ? `${body.total}${body.total_exact === false ? '+' : ''}` : `tree ${body.tree_size ?? body.to}`,
  };
}

const orgs = [];
for (const size of SIZES) orgs.push(await orgWithHistory(size));
const rows = [];
for (const [i, [name]] of listings(orgs[0]).entries()) {
  const row: Record<string, string | number> = { listing: name };
  const times = [];
  for (const org of orgs) {
    const [, path, follow] = listings(org)[i];
    const measured = await time(path, org.auth, follow);
    row[`${org.size} ms`] = Number(measured.ms.toFixed(1));
    row[`${org.size} items/total`] = `${measured.items}/${measured.total}`;
    times.push(measured.ms);
  }
  row[`${SIZES.at(-1)} / ${SIZES[0]}`] = (times.at(-1)! / times[0]).toFixed(2);
  rows.push(row);
}
console.log(`database: ${db.kind}; median of ${REPEAT} requests each`);
console.table(rows);

server.close();
await app.stop();
await db.close();
