/**
 * A long history written with SQL rather than through the gateway: `size` records and `size`
 * audit entries in an org, one of each a second up to now (or evenly over `spanSeconds`), over 20 agents, 5 action types with 4
 * tools, every tenth record denied, 10 audit actions in 5 families by 5 actors on 1000 targets.
 * The records are chained by seq but not signed: for listings, proofs and their costs, not
 * verification. Their Merkle tree (migration record_tree) is built with set-based SQL, level by
 * level, as appends would have built it. Used by the listing tests and `npm run bench:history`.
 */

export const HISTORY_AGENTS = 20;
export const HISTORY_ACTION_TYPES = ['billing', 'email', 'crm', 'files', 'search'];
export const HISTORY_TOOLS = ['read', 'write', 'list', 'delete'];
export const HISTORY_AUDIT_ACTIONS = [
  'manifest.registered',
  'manifest.approved',
  'manifest.suspended',
  'api_key.created',
  'api_key.deleted',
  'policy.created',
  'policy.updated',
  'tool.created',
  'approval.approved',
  'approval.denied',
];
export const HISTORY_ACTORS = 5;

/** The seeded record hash of seq `seq` (an SQL expression): SHA-256 of 'h' and the seq, as a record hash. */
const recordHash = (seq: string) => `'sha256:' || encode(sha256(convert_to('h' || (${seq})::text, 'UTF8')), 'hex')`;

const sqlArray = (values: string[]) => `ARRAY[${values.map((v) => `'${v}'`).join(',')}]`;

/**
 * Appends the history in slices, so that no statement holds millions of rows in memory (PGlite).
 * With `payloadBytes`, each record keeps params and each audit entry an `after` of about that many
 * bytes (`{"n": i, "note": "xxx…"}`), so that an export's size can be set (the export tests).
 */
export async function seedHistory(
  query: (text: string, values: unknown[]) => Promise<unknown>,
  orgId: string,
  size: number,
  { payloadBytes = 0, spanSeconds = size }: { payloadBytes?: number; spanSeconds?: number } = {},
): Promise<void> {
  // Seconds between two entries: a busy org's history packs more of them into each day.
  const spacing = spanSeconds / size;
  const payload = payloadBytes ? `jsonb_build_object('n', i, 'note', repeat('x', ${Math.trunc(payloadBytes)}))` : '';
  const SLICE = 250_000;
  for (let first = 1; first <= size; first += SLICE) {
    const last = Math.min(size, first + SLICE - 1);
    await query(
      `INSERT INTO interaction_records (id, org_id, seq, svc_id, agent_id, action_type, tool, capability,
         params_hash, params, status, executed, reasons, result_hash, approval_id, policies, channel,
         prev_hash, record_hash, signature, key_id, created_at)
       SELECT 'int_' || md5($1::text || i), $1::uuid, i, 'agent-' || (i % ${HISTORY_AGENTS}), 'agent-' || (i % ${HISTORY_AGENTS}),
         (${sqlArray(HISTORY_ACTION_TYPES)})[1 + i % ${HISTORY_ACTION_TYPES.length}],
         (${sqlArray(HISTORY_TOOLS)})[1 + (i / 7) % ${HISTORY_TOOLS.length}],
         'cap', md5('p' || i), ${payload || 'NULL'},
         (CASE WHEN i % 10 = 0 THEN 'denied' ELSE 'approved' END)::"RecordStatus", i % 10 <> 0,
         '[]'::jsonb, md5('r' || i), NULL, '[]'::jsonb, 'rest',
         ${recordHash('i - 1')}, ${recordHash('i')}, 'sig', 'kid',
         now() - make_interval(secs => ($2::bigint - i) * $5::float8)
       FROM generate_series($3::bigint, $4::bigint) AS i`,
      [orgId, size, first, last, spacing],
    );
    await query(
      `INSERT INTO audit_logs (id, org_id, actor_type, actor_id, actor_label, action, target_type, target_id,
         before, after, reason, request_id, created_at)
       SELECT 'aud_' || md5($1::text || i), $1::uuid, 'user', 'user-' || (i % ${HISTORY_ACTORS}),
         'user' || (i % ${HISTORY_ACTORS}) || '@history.example',
         (${sqlArray(HISTORY_AUDIT_ACTIONS)})[1 + i % ${HISTORY_AUDIT_ACTIONS.length}],
         'manifest', 'm-' || (i % 1000), NULL, ${payload || `'{"ok": true}'::jsonb`}, NULL, NULL,
         now() - make_interval(secs => ($2::bigint - i) * $5::float8)
       FROM generate_series($3::bigint, $4::bigint) AS i`,
      [orgId, size, first, last, spacing],
    );
  }
  await query(
    `INSERT INTO record_chain_heads (org_id, seq, head_hash, last_created_at, updated_at)
     VALUES ($1::uuid, $2, ${recordHash('$2::bigint')}, now(), now())`,
    [orgId, size],
  );
  await seedTree(query, orgId, size);
}

/**
 * The Merkle tree of the seeded records: every node level by level in a scratch table (each level
 * one statement pairing the level below), then each record's completed nodes and the head's edge.
 */
async function seedTree(query: (text: string, values: unknown[]) => Promise<unknown>, orgId: string, size: number) {
  const table = `history_tree_${orgId.replace(/-/g, '')}`;
  await query(`CREATE UNLOGGED TABLE ${table} (level int, idx bigint, hash bytea, PRIMARY KEY (level, idx))`, []);
  try {
    await query(
      `INSERT INTO ${table} SELECT 0, seq - 1, sha256('\\x00'::bytea || decode(substr(record_hash, 8), 'hex'))
       FROM interaction_records WHERE org_id = $1::uuid`,
      [orgId],
    );
    for (let level = 0; size >> (level + 1) > 0; level++) {
      await query(
        `INSERT INTO ${table} SELECT $1::int + 1, l.idx / 2, sha256('\\x01'::bytea || l.hash || r.hash)
         FROM ${table} l JOIN ${table} r ON r.level = $1::int AND r.idx = l.idx + 1
         WHERE l.level = $1::int AND l.idx % 2 = 0`,
        [level],
      );
    }
    await query(
      `UPDATE interaction_records r SET tree_nodes = n.nodes
       FROM (SELECT (idx + 1) << level AS seq, string_agg(hash, ''::bytea ORDER BY level) AS nodes
             FROM ${table} WHERE level >= 1 GROUP BY 1) n
       WHERE r.org_id = $1::uuid AND r.seq = n.seq`,
      [orgId],
    );
    // The edge: one complete subtree per bit of the size, largest first.
    const edge: { level: number; idx: number }[] = [];
    for (let level = 31, at = 0; level >= 0; level--)
      if (size & (1 << level)) {
        edge.push({ level, idx: at >> level });
        at += 1 << level;
      }
    await query(
      `UPDATE record_chain_heads SET tree_frontier = COALESCE((
         SELECT string_agg(t.hash, ''::bytea ORDER BY e.ord)
         FROM unnest($2::int[], $3::bigint[]) WITH ORDINALITY AS e(level, idx, ord)
         JOIN ${table} t ON t.level = e.level AND t.idx = e.idx), ''::bytea)
       WHERE org_id = $1::uuid`,
      [orgId, edge.map((e) => e.level), edge.map((e) => e.idx)],
    );
  } finally {
    await query(`DROP TABLE ${table}`, []);
  }
}
