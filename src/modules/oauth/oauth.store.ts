import type { SqlConnection } from '../../db/sql.js';
import type { ClientRegistration } from './oauth-client.js';

/** The OAuth module's raw SQL. */

export interface ClientRow {
  client_id: string;
  metadata: ClientRegistration;
  created_at: Date;
}

export async function insertClient(sql: SqlConnection, clientId: string, registration: ClientRegistration, registeredFrom: string): Promise<ClientRow> {
  const [row] = await sql.query<ClientRow>(
    `INSERT INTO oauth_clients (client_id, redirect_uris, metadata, registered_from)
     VALUES ($1, $2::text[], $3::jsonb, $4)
     RETURNING client_id, metadata, created_at`,
    [clientId, registration.redirect_uris, JSON.stringify(registration), registeredFrom],
  );
  return row;
}

/** A client that has not expired: used within `unusedDays`. */
export async function findClient(sql: SqlConnection, clientId: string, unusedDays: number): Promise<ClientRow | undefined> {
  const [row] = await sql.query<ClientRow>(
    `SELECT client_id, metadata, created_at FROM oauth_clients
     WHERE client_id = $1 AND last_used_at > now() - make_interval(days => $2)`,
    [clientId, unusedDays],
  );
  return row;
}

/** Marks the client used, at most once an hour (a token refresh every few minutes writes nothing). */
export async function touchClient(sql: SqlConnection, clientId: string): Promise<void> {
  await sql.query(`UPDATE oauth_clients SET last_used_at = now() WHERE client_id = $1 AND last_used_at < now() - interval '1 hour'`, [clientId]);
}

/** Deletes the registrations unused for `unusedDays`; how many. */
export async function deleteExpiredClients(sql: SqlConnection, unusedDays: number): Promise<number> {
  const rows = await sql.query(`DELETE FROM oauth_clients WHERE last_used_at <= now() - make_interval(days => $1) RETURNING client_id`, [unusedDays]);
  return rows.length;
}
