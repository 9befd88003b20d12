/**
 * A long history written with SQL rather than through the gateway: `size` records and `size`
 * audit entries in an org, one of each a second up to now, over 20 agents, 5 action types with 4
 * tools, every tenth record denied, 10 audit actions in 5 families by 5 actors on 1000 targets.
 * The records are chained by seq but not signed: for listings and their costs, not verification.
 * Used by the listing tests and `npm run bench:history`.
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

const sqlArray = (values: string[]) => `ARRAY[${values.map((v) => `'${v}'`).join(',')}]`;

/** Appends the history in slices, so that no statement holds millions of rows in memory (PGlite). */
export async function seedHistory(
  query: (text: string, values: unknown[]) => Promise<unknown>,
  orgId: string,
  size: number,
): Promise<void> {
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
         'cap', md5('p' || i), NULL,
         (CASE WHEN i % 10 = 0 THEN 'denied' ELSE 'approved' END)::"RecordStatus", i % 10 <> 0,
         '[]'::jsonb, md5('r' || i), NULL, '[]'::jsonb, 'rest',
         md5('h' || (i - 1)), md5('h' || i), 'sig', 'kid',
         now() - make_interval(secs => $2::bigint - i)
       FROM generate_series($3::bigint, $4::bigint) AS i`,
      [orgId, size, first, last],
    );
    await query(
      `INSERT INTO audit_logs (id, org_id, actor_type, actor_id, actor_label, action, target_type, target_id,
         before, after, reason, request_id, created_at)
       SELECT 'aud_' || md5($1::text || i), $1::uuid, 'user', 'user-' || (i % ${HISTORY_ACTORS}),
         'user' || (i % ${HISTORY_ACTORS}) || '@history.example',
         (${sqlArray(HISTORY_AUDIT_ACTIONS)})[1 + i % ${HISTORY_AUDIT_ACTIONS.length}],
         'manifest', 'm-' || (i % 1000), NULL, '{"ok": true}'::jsonb, NULL, NULL,
         now() - make_interval(secs => $2::bigint - i)
       FROM generate_series($3::bigint, $4::bigint) AS i`,
      [orgId, size, first, last],
    );
  }
  await query(
    `INSERT INTO record_chain_heads (org_id, seq, head_hash, updated_at) VALUES ($1::uuid, $2, md5('h' || $2::bigint), now())`,
    [orgId, size],
  );
}
