/**
 * Users (admins only, as in the API): each user of the organization with their role; change it,
 * or remove the user. The service decides what may be done: the organization's last admin can be
 * neither demoted nor removed, and its refusal (409) is shown as it says it, beside the user.
 * A new role applies from the user's next request (docs/decisions/0060-user-roles-and-removal.md).
 */
import { useEffect, useId, useState } from 'preact/hooks';
import {
  RemoveUserDocument,
  UpdateUserRoleDocument,
  UsersDocument,
  type UserRole,
  type UsersQuery,
} from '../generated/graphql';
import { request, setSignedInRole, signOut, type SignedInUser } from './api';
import { ConfirmButton, counted, ErrorLine, Section, Status, Time, useAction, usePolled } from './ui';

type User = UsersQuery['users']['items'][number];

const ROLES: readonly UserRole[] = ['admin', 'operator', 'viewer'];

export function UsersPage({ user }: { user: SignedInUser }) {
  // The API lets only admins list users; the navigation offers the page to admins alone, and its
  // address says why instead of showing a refusal.
  if (user.role !== 'admin') {
    return (
      <Section title="Users">
        <p>The organization's users and their roles are shown to admins only.</p>
      </Section>
    );
  }
  return <UserList me={user} />;
}

function UserList({ me }: { me: SignedInUser }) {
  const users = usePolled(() => request(UsersDocument, { org_id: me.org_id }), me.org_id);
  const list = users.data?.users;
  return (
    <Section title="Users" actions={<p class="count">{list ? counted(list.total, 'user') : 'Loading…'}</p>}>
      <p class="muted intro">
        Admins manage users, API keys and settings; operators decide approvals and manage manifests, agents, tools and
        policies; viewers read. A new role applies from the user’s next request. Add users through the API,{' '}
        <code>POST /api/v1/orgs/{me.org_id}/users</code>.
      </p>
      <ErrorLine message={users.error} />
      <ul class="cards">
        {list?.items.map((user) => (
          <li key={user.user_id}>
            <UserCard user={user} me={me} onChanged={users.reload} />
          </li>
        ))}
      </ul>
    </Section>
  );
}

function UserCard({ user, me, onChanged }: { user: User; me: SignedInUser; onChanged: () => Promise<void> }) {
  const [role, setRole] = useState<UserRole>(user.role);
  // A change made elsewhere (another admin, another tab) shows as it arrives.
  useEffect(() => setRole(user.role), [user.role]);
  const roleId = useId();
  const action = useAction(onChanged);
  const self = user.user_id === me.user_id;
  const changeRole = () =>
    action.run(async () => {
      const changed = await request(UpdateUserRoleDocument, { org_id: me.org_id, user_id: user.user_id, role });
      // Demoted by themself: the console offers at once what the new role may do.
      if (self) setSignedInRole(changed.update_user_role.role);
    });
  const remove = () =>
    action.run(async () => {
      await request(RemoveUserDocument, { org_id: me.org_id, user_id: user.user_id });
      // Their own session ended with them.
      if (self) await signOut();
    });
  return (
    <article class="card" aria-label={`User ${user.email}`} data-user-id={user.user_id}>
      <header class="card-header">
        <h2>
          {user.email}
          {self && <span class="muted"> (you)</span>}
        </h2>
        <Status value={user.role} />
      </header>
      <dl class="facts">
        <dt>Added</dt>
        <dd>
          <Time value={user.created_at} />
        </dd>
      </dl>
      <div class="decide">
        <label for={roleId}>Role</label>
        <select id={roleId} value={role} onChange={(e) => setRole(e.currentTarget.value as UserRole)}>
          {ROLES.map((r) => (
            <option value={r}>{r}</option>
          ))}
        </select>
        <div class="buttons">
          <button
            type="button"
            class="primary"
            disabled={action.busy || role === user.role}
            onClick={() => void changeRole()}
          >
            Change role
          </button>
          <ConfirmButton
            label="Remove"
            confirmLabel="Yes, remove"
            question={`Remove ${user.email}?`}
            tone="danger"
            busy={action.busy}
            onConfirm={remove}
          >
            Remove {self ? 'yourself' : user.email}? {self ? 'You are' : 'They are'} signed out at once, everywhere. API
            keys {self ? 'you' : 'they'} created and clients {self ? 'you' : 'they'} allowed stay the organization’s.
          </ConfirmButton>
        </div>
      </div>
      <ErrorLine message={action.error} />
    </article>
  );
}
