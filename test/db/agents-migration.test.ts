import { randomUUID } from 'node:crypto';
import { cp, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { defaultMigrationsDir, migrate } from '../../src/db/migrate.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';

/**
 * The agents migration (prisma/migrations/20261124010000_agents) on a database that already has
 * manifests: every (org, svc_id) becomes one agent, named by its newest manifest's agent block,
 * created when and by whom its first manifest was, owned by that registrant when it was a user.
 */

const AGENTS_MIGRATION = '20261124010000_agents';

let t: TestDatabase;
let before: string;
beforeAll(async () => {
  t = await createTestDatabase({ migrate: false });
  // Every migration before the agents one (not those after it, which may need its table): the
  // schema of an installation from before agents.
  before = await mkdtemp(path.join(os.tmpdir(), 'agw-before-agents-'));
  await cp(defaultMigrationsDir, before, {
    recursive: true,
    filter: (source) => {
      const [top] = path.relative(defaultMigrationsDir, source).split(path.sep);
      return top === '' || !/^\d{14}_/.test(top) || top < AGENTS_MIGRATION;
    },
  });
});
afterAll(async () => {
  await rm(before, { recursive: true, force: true });
  await t.close();
});

const sql = (text: string, params: unknown[] = []) => t.db.sql.query(text, params);

async function insertOrg(slug: string): Promise<string> {
  const id = randomUUID();
  await sql(`INSERT INTO organizations (id, name, slug, updated_at) VALUES ($1::uuid, $2, $2, now())`, [id, slug]);
  return id;
}

async function insertUser(orgId: string, email: string) {
  await sql(
    `INSERT INTO users (id, org_id, email, password_hash, role) VALUES ($1::uuid, $2::uuid, $3, 'x', 'admin')`,
    [randomUUID(), orgId, email],
  );
}

interface OldManifest {
  orgId: string;
  agent: { id: string; name: string; version: string; team?: string; description?: string };
  status: 'pending' | 'active';
  createdBy: string;
  createdAt: string;
}

/** A manifest row as the service stored them before agents existed. */
async function insertManifest(m: OldManifest): Promise<void> {
  const document = { version: '1.0', agent: m.agent, capabilities: { requested: ['billing:read'] } };
  await sql(
    `INSERT INTO manifests (id, org_id, svc_id, version, status, manifest_hash, document, team, requested_capabilities,
                            approved_capabilities, created_by, created_at, updated_at)
     VALUES ($1::uuid, $2::uuid, $3, '1.0', $4::"ManifestStatus", $5, $6::jsonb, $7, ARRAY['billing:read'],
             $8::text[], $9, $10::timestamptz, $10::timestamptz)`,
    [
      randomUUID(),
      m.orgId,
      m.agent.id,
      m.status,
      `sha256:${randomUUID().replace(/-/g, '')}`,
      JSON.stringify(document),
      m.agent.team ?? null,
      m.status === 'active' ? ['billing:read'] : [],
      m.createdBy,
      m.createdAt,
    ],
  );
}

test('every agent id with manifests becomes one agent: newest name and team, first creation, user owner or none', async () => {
  const applied = await migrate(t.db.sql, before);
  expect(applied).not.toContain(AGENTS_MIGRATION);
  expect(applied.length).toBeGreaterThan(0);

  const orgA = await insertOrg('org-a');
  const orgB = await insertOrg('org-b');
  await insertUser(orgA, 'alice@a.example');
  await insertUser(orgA, 'bob@a.example');
  await insertUser(orgB, 'carol@b.example');
  // billing-agent of org A: approved v1 by alice, then a pending v2 by bob that renames it and moves it to another team.
  await insertManifest({
    orgId: orgA,
    agent: { id: 'billing-agent', name: 'Billing v1', version: '1.0.0', team: 'finance' },
    status: 'active',
    createdBy: 'alice@a.example',
    createdAt: '2026-01-01T10:00:00.000Z',
  });
  await insertManifest({
    orgId: orgA,
    agent: {
      id: 'billing-agent',
      name: 'Billing assistant',
      version: '2.0.0',
      team: 'payments',
      description: 'Issues refunds',
    },
    status: 'pending',
    createdBy: 'bob@a.example',
    createdAt: '2026-02-01T10:00:00.000Z',
  });
  // report-bot of org A: registered by an API key (an id, not an email), without team or description.
  await insertManifest({
    orgId: orgA,
    agent: { id: 'report-bot', name: 'Reports', version: '0.1.0' },
    status: 'pending',
    createdBy: 'key_0123456789abcdef',
    createdAt: '2026-01-15T08:30:00.000Z',
  });
  // The same agent id in org B is org B's own agent, made from org B's manifests only.
  await insertManifest({
    orgId: orgB,
    agent: { id: 'billing-agent', name: 'Their billing', version: '1.0.0', team: 'ops' },
    status: 'active',
    createdBy: 'carol@b.example',
    createdAt: '2026-03-01T12:00:00.000Z',
  });

  expect((await migrate(t.db.sql))[0]).toBe(AGENTS_MIGRATION);

  const rows = await t.db.sql.query<Record<string, unknown>>(
    `SELECT org_id, id, name, description, team, owner_email, labels, status, last_seen_at, created_at, created_by,
            deactivated_at, deactivated_by, deactivation_reason
     FROM agents ORDER BY created_at`,
  );
  const common = {
    labels: {},
    status: 'active',
    last_seen_at: null,
    deactivated_at: null,
    deactivated_by: null,
    deactivation_reason: null,
  };
  expect(rows.map((row) => ({ ...row, created_at: (row.created_at as Date).toISOString() }))).toEqual([
    {
      ...common,
      org_id: orgA,
      id: 'billing-agent',
      name: 'Billing assistant',
      description: 'Issues refunds',
      team: 'payments',
      owner_email: 'alice@a.example',
      created_at: '2026-01-01T10:00:00.000Z',
      created_by: 'alice@a.example',
    },
    {
      ...common,
      org_id: orgA,
      id: 'report-bot',
      name: 'Reports',
      description: '',
      team: null,
      owner_email: null,
      created_at: '2026-01-15T08:30:00.000Z',
      created_by: 'key_0123456789abcdef',
    },
    {
      ...common,
      org_id: orgB,
      id: 'billing-agent',
      name: 'Their billing',
      description: '',
      team: 'ops',
      owner_email: 'carol@b.example',
      created_at: '2026-03-01T12:00:00.000Z',
      created_by: 'carol@b.example',
    },
  ]);
});
