/**
 * Sign-up in the console: while the deployment takes sign-ups (`signup { open }`, SIGNUP=open),
 * the sign-in page offers "Create an organization", and /console/sign-up creates the organization
 * and its first admin (`create_organization`), then signs that admin in, so a newcomer needs no
 * API client. A deployment with closed sign-up offers neither (docs/console.md).
 */
import { Fragment, type InputHTMLAttributes } from 'preact';
import { useEffect, useId, useRef, useState } from 'preact/hooks';
import { CreateOrganizationDocument, SignUpStatusDocument } from '../generated/graphql';
import { ApiError, request, signIn } from './api';
import { followInConsole, messageOf } from './ui';

/**
 * Whether the deployment takes sign-ups: undefined until the service says, null when it could not
 * be asked (the service answers a sign-up itself anyway).
 */
export function useSignUpOpen(): boolean | null | undefined {
  const [open, setOpen] = useState<boolean | null | undefined>(undefined);
  useEffect(() => {
    let current = true;
    request(SignUpStatusDocument, {}).then(
      (data) => current && setOpen(data.signup.open),
      () => current && setOpen(null),
    );
    return () => {
      current = false;
    };
  }, []);
  return open;
}

const FIELDS = [
  { name: 'name', label: 'Organization name', type: 'text', autoComplete: 'organization' },
  {
    name: 'slug',
    label: 'Slug',
    type: 'text',
    autoComplete: 'off',
    hint: 'Its short name, in addresses and for single sign-on: e.g. acme-robotics.',
  },
  {
    name: 'admin_email',
    label: 'Admin email',
    type: 'email',
    autoComplete: 'username',
    hint: 'Yours: you become its first admin, who adds the other users.',
  },
  { name: 'admin_password', label: 'Password', type: 'password', autoComplete: 'new-password' },
] as const;
type Field = (typeof FIELDS)[number]['name'];
type Values = Record<Field, string>;

/** What the service refused, by field: each of a 422's fields, or the one field a 409 names (slug or email taken). */
function refusedFields(failure: unknown): Partial<Values> {
  if (!(failure instanceof ApiError)) return {};
  const refused: Partial<Values> = {};
  for (const problem of failure.details?.errors ?? []) {
    const field = problem.field as Field;
    refused[field] = refused[field] ? `${refused[field]}; ${problem.message}` : problem.message;
  }
  const conflicting = failure.details?.field as Field | undefined;
  if (failure.code === 'CONFLICT' && conflicting) refused[conflicting] = failure.message;
  return refused;
}

/** Where a sign-up started from the console ends: the console, signed in as the new admin. */
export function SignUpPage({ toSignIn }: { toSignIn: () => void }) {
  const open = useSignUpOpen();
  const [values, setValues] = useState<Values>({ name: '', slug: '', admin_email: '', admin_password: '' });
  const [refused, setRefused] = useState<Partial<Values>>({});
  const [error, setError] = useState<string | undefined>(undefined);
  const [created, setCreated] = useState(false);
  const [busy, setBusy] = useState(false);
  const id = useId();
  const heading = useRef<HTMLHeadingElement>(null);
  const fieldId = (field: Field) => `${id}-${field}`;

  useEffect(() => {
    const title = document.title;
    document.title = 'Create an organization · Agent Gateway console';
    // Screen readers and keyboards start on the page's heading, as after a page load.
    heading.current?.focus();
    return () => {
      document.title = title;
    };
  }, []);

  const submit = async (event: Event) => {
    event.preventDefault();
    setBusy(true);
    setError(undefined);
    setRefused({});
    const email = values.admin_email.trim();
    try {
      await request(CreateOrganizationDocument, { ...values, admin_email: email });
    } catch (failure) {
      const fields = refusedFields(failure);
      setRefused(fields);
      setError(
        Object.keys(fields).length
          ? 'The organization was not created; see what the service refused.'
          : messageOf(failure, { code: false }),
      );
      setBusy(false);
      const first = FIELDS.find((field) => fields[field.name]);
      if (first) document.getElementById(fieldId(first.name))?.focus();
      return;
    }
    setCreated(true);
    try {
      // The new session opens the console: the app leaves this address for the console's own.
      await signIn(email, values.admin_password);
    } catch (failure) {
      setError(`The organization was created, but signing in failed: ${messageOf(failure, { code: false })}`);
      setBusy(false);
    }
  };

  const back = (
    <p class="account-help">
      Already have an account?{' '}
      <a href="/console" onClick={followInConsole(toSignIn)}>
        Sign in
      </a>
    </p>
  );

  return (
    <main id="main" class="sign-in">
      <h1 id="page-title" tabIndex={-1} ref={heading}>
        Create an organization
      </h1>
      {open === false && (
        <p>
          Sign-up is closed on this deployment: its operators create the organizations. If yours has one, an admin of it
          adds you.
        </p>
      )}
      {/* Only once the service said it takes sign-ups: a closed deployment shows no form, not even for a moment. */}
      {(open === true || open === null) && (
        <form onSubmit={submit} aria-label="Create an organization">
          {FIELDS.map((field) => {
            const problem = refused[field.name];
            const hint = 'hint' in field ? field.hint : undefined;
            const described = [hint && `${fieldId(field.name)}-hint`, problem && `${fieldId(field.name)}-problem`]
              .filter(Boolean)
              .join(' ');
            return (
              <Fragment key={field.name}>
                <label for={fieldId(field.name)}>{field.label}</label>
                <input
                  // Preact types each input type's attributes apart: one element for the three is typed as a whole.
                  {...({
                    id: fieldId(field.name),
                    type: field.type,
                    autoComplete: field.autoComplete,
                  } as InputHTMLAttributes<HTMLInputElement>)}
                  required
                  disabled={created}
                  value={values[field.name]}
                  aria-invalid={problem ? 'true' : undefined}
                  aria-describedby={described || undefined}
                  onInput={(e) => setValues({ ...values, [field.name]: e.currentTarget.value })}
                />
                {hint && (
                  <p class="muted hint" id={`${fieldId(field.name)}-hint`}>
                    {hint}
                  </p>
                )}
                {problem && (
                  <p class="error" id={`${fieldId(field.name)}-problem`}>
                    {problem}
                  </p>
                )}
              </Fragment>
            );
          })}
          <button type="submit" class="primary" disabled={busy || created}>
            Create organization
          </button>
          {error && (
            <p class="error" role="alert">
              {error}
            </p>
          )}
        </form>
      )}
      {back}
    </main>
  );
}
