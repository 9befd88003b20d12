/**
 * The operator console: sign-in, then the pages under /console/<page>. Routing is the browser's
 * history (every /console/… path is served the same index page), so pages have addresses that
 * reload and bookmark. /console/authorize, the consent page of OAuth clients, stands apart: no
 * navigation away from the request, and its address (the request) is kept through the sign-in.
 */
import { render, type ComponentChildren } from 'preact';
import { useEffect, useId, useState } from 'preact/hooks';
import './console.css';
import {
  canDecide,
  currentSession,
  onSessionChange,
  signIn,
  signInWithSsoCode,
  signOut,
  type Session,
  type SignedInUser,
  whySessionEnded,
} from './api';
import { AgentsPage } from './agents';
import { ApprovalsPage } from './approvals';
import { ManifestsPage } from './manifests';
import { PoliciesPage } from './policies';
import { ConsentPage } from './consent';
import { AuditPage, RecordsPage } from './records';
import { ToolsPage, useToolDrift } from './tools';
import { UsersPage } from './users';
import { SignUpPage, useSignUpOpen } from './sign-up';
import { followInConsole, messageOf } from './ui';

const BASE = '/console';
const PAGES = [
  { path: 'approvals', title: 'Approvals', Page: ApprovalsPage },
  { path: 'manifests', title: 'Manifests', Page: ManifestsPage },
  { path: 'agents', title: 'Agents', Page: AgentsPage },
  { path: 'policies', title: 'Policies', Page: PoliciesPage },
  { path: 'tools', title: 'Tools', Page: ToolsPage },
  { path: 'records', title: 'Records', Page: RecordsPage },
  { path: 'audit', title: 'Audit log', Page: AuditPage },
  { path: 'users', title: 'Users', Page: UsersPage },
] as const;
type PagePath = (typeof PAGES)[number]['path'];
/**
 * Whether the navigation offers a page to this user: not one the API refuses them whole (viewers
 * cannot read tools, only admins manage users). Its address still answers, saying why.
 */
const offered = (path: PagePath, user: SignedInUser) =>
  (path !== 'tools' || canDecide(user)) && (path !== 'users' || user.role === 'admin');
/** Where /oauth/authorize sends the browser (src/http/oauth-endpoints.ts, CONSENT_PATH). */
const CONSENT_PATH = `${BASE}/authorize`;

const onConsentPage = () => location.pathname.replace(/\/+$/, '') === CONSENT_PATH;
/** Where single sign-on ends (src/http/sso-endpoints.ts, SSO_CONSOLE_PATH): `#code=…` or `#error=…&error_description=…`. */
const SSO_PATH = `${BASE}/sso`;
const onSsoPage = () => location.pathname.replace(/\/+$/, '') === SSO_PATH;
/** Where the sign-in page's "Create an organization" leads, while the deployment takes sign-ups. */
const SIGN_UP_PATH = `${BASE}/sign-up`;
const onSignUpPage = () => location.pathname.replace(/\/+$/, '') === SIGN_UP_PATH;
/** The organization last signed in with SSO, offered again: a slug is no secret. */
const SSO_ORG_KEY = 'agent-gateway.console.sso-org';
/** The console address to come back to after SSO (the consent page and its request), for this tab only. */
const SSO_RETURN_KEY = 'agent-gateway.console.sso-return';

/** Where the console opens after SSO: the address it left from, if it was one of the console's own. */
function ssoReturnAddress(): string {
  const stored = sessionStorage.getItem(SSO_RETURN_KEY);
  sessionStorage.removeItem(SSO_RETURN_KEY);
  // Only a path of this console: never another origin, never a protocol-relative `//host`.
  return stored && /^\/console(\/|\?|$)/.test(stored) && !stored.startsWith(SSO_PATH) ? stored : BASE;
}

function pageFromLocation(): PagePath | undefined {
  const rest = location.pathname.slice(BASE.length).replace(/^\/+|\/+$/g, '');
  if (rest === '') return 'approvals';
  // A tool's own address (`/console/tools/<tool_id>`, where connecting it ends) is the Tools page.
  if (/^tools\/[^/]+$/.test(rest)) return 'tools';
  return PAGES.find((page) => page.path === rest)?.path;
}

function useRoute(): [PagePath | undefined, (path: PagePath) => void] {
  const [page, setPage] = useState(pageFromLocation);
  useEffect(() => {
    const onPop = () => setPage(pageFromLocation());
    addEventListener('popstate', onPop);
    return () => removeEventListener('popstate', onPop);
  }, []);
  const navigate = (path: PagePath) => {
    history.pushState(null, '', `${BASE}/${path}`);
    setPage(path);
  };
  return [page, navigate];
}

/**
 * Goes to another address of the console without a page load; the app, which renders by the
 * address (usePathChanges), follows as it does the browser's back and forward.
 */
function go(path: string) {
  history.pushState(null, '', path);
  dispatchEvent(new PopStateEvent('popstate'));
}

/** Renders again whenever the address changes (go, back, forward). */
function usePathChanges(): void {
  const [, setPath] = useState(location.pathname);
  useEffect(() => {
    const onPop = () => setPath(location.pathname);
    addEventListener('popstate', onPop);
    return () => removeEventListener('popstate', onPop);
  }, []);
}

function useSession(): Session | null {
  const [session, setSession] = useState(currentSession);
  useEffect(() => onSessionChange(setSession), []);
  return session;
}

/**
 * "Sign in with SSO": the organization's slug, then the browser goes to `/auth/sso/{slug}` and on to
 * the organization's identity provider. A navigation, not a form submission: the console's CSP
 * (`form-action 'self'`) would stop a form at the redirect to the provider.
 */
function SsoSignIn() {
  const [slug, setSlug] = useState(() => localStorage.getItem(SSO_ORG_KEY) ?? '');
  const slugId = useId();
  const submit = (event: Event) => {
    event.preventDefault();
    const org = slug.trim().toLowerCase();
    localStorage.setItem(SSO_ORG_KEY, org);
    sessionStorage.setItem(SSO_RETURN_KEY, location.pathname + location.search);
    location.assign(`/auth/sso/${encodeURIComponent(org)}`);
  };
  return (
    <form class="sso" onSubmit={submit} aria-label="Single sign-on">
      <label for={slugId}>Organization</label>
      <input
        id={slugId}
        type="text"
        autoComplete="organization"
        required
        pattern="[a-z0-9\-]+"
        title="The organization's slug: lowercase letters, digits and hyphens"
        value={slug}
        onInput={(e) => setSlug(e.currentTarget.value)}
      />
      <button type="submit">Sign in with SSO</button>
    </form>
  );
}

/**
 * "No account?": where the deployment takes sign-ups, a link to create an organization; where it
 * does not (SIGNUP=closed), who adds users instead. Nothing unless the service has said which.
 */
function AccountHelp() {
  const open = useSignUpOpen();
  if (open === undefined || open === null) return null;
  return open ? (
    <p class="account-help">
      No account?{' '}
      <a href={SIGN_UP_PATH} onClick={followInConsole(() => go(SIGN_UP_PATH))}>
        Create an organization
      </a>{' '}
      and become its first admin; an admin adds the other users.
    </p>
  ) : (
    <p class="muted account-help">
      No account? An admin of your organization adds you; this deployment does not take sign-ups.
    </p>
  );
}

/**
 * `intro`: why this sign-in, when the page asked for it is not the console's own (the consent page,
 * which offers no sign-up: the request it holds is about an organization that exists).
 * `refusal`: why single sign-on did not sign the user in, when it just failed.
 * `ended`: why the service ended the session this tab had, when it did.
 */
function SignIn({ intro, refusal, ended }: { intro?: string; refusal?: string; ended?: string }) {
  const [email, setEmail] = useState('');
  const [password, setPassword] = useState('');
  const [error, setError] = useState<string | undefined>(undefined);
  const [busy, setBusy] = useState(false);
  const emailId = useId();
  const passwordId = useId();
  const submit = async (event: Event) => {
    event.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      await signIn(email.trim(), password);
    } catch (failure) {
      // "Email or password is wrong" says it all: its code (INVALID_TOKEN) would only puzzle.
      setError(messageOf(failure, { code: false }));
      setBusy(false);
    }
  };
  return (
    <main id="main" class="sign-in">
      <h1>Agent Gateway console</h1>
      {ended && (
        <p class="notice" role="status">
          Your session ended. {ended}
        </p>
      )}
      {intro && <p>{intro}</p>}
      <form onSubmit={submit}>
        <label for={emailId}>Email</label>
        <input
          id={emailId}
          type="email"
          autoComplete="username"
          required
          value={email}
          onInput={(e) => setEmail(e.currentTarget.value)}
        />
        <label for={passwordId}>Password</label>
        <input
          id={passwordId}
          type="password"
          autoComplete="current-password"
          required
          value={password}
          onInput={(e) => setPassword(e.currentTarget.value)}
        />
        <button type="submit" class="primary" disabled={busy}>
          Sign in
        </button>
        {error && (
          <p class="error" role="alert">
            {error}
          </p>
        )}
      </form>
      <p class="or">or, if your organization uses its identity provider:</p>
      <SsoSignIn />
      {refusal && (
        <p class="error" role="alert">
          Single sign-on failed: {refusal}
        </p>
      )}
      {intro ? <p class="muted account-help">No account? An admin of your organization adds you.</p> : <AccountHelp />}
    </main>
  );
}

/** Who is signed in, and the way out (another account is signed in from the form that follows). */
function Who({ session }: { session: Session }) {
  const { user } = session;
  return (
    <div class="who">
      <span>
        {user.email} <span class="role">{user.role}</span>
      </span>
      <button type="button" onClick={() => void signOut()}>
        Sign out
      </button>
    </div>
  );
}

/** The page around every signed-in page: skip link, header (brand, `nav` when given, who is signed in), main. */
function Frame({ session, nav, children }: { session: Session; nav?: ComponentChildren; children: ComponentChildren }) {
  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="top">
        <span class="brand">Agent Gateway</span>
        {nav}
        <Who session={session} />
      </header>
      <main id="main">{children}</main>
    </>
  );
}

/** Tool definitions waiting for review, beside Tools in the navigation: calls of them are denied meanwhile. */
function NavCount({ count }: { count: number }) {
  return (
    <span class="nav-count">
      {' '}
      {count}
      <span class="visually-hidden"> to review</span>
    </span>
  );
}

function Console({ session }: { session: Session }) {
  const [page, navigate] = useRoute();
  const current = PAGES.find((p) => p.path === page);
  const drift = useToolDrift(session.user, page === 'tools');
  useEffect(() => {
    document.title = `${current?.title ?? 'Not found'} · Agent Gateway console`;
    // Screen readers and keyboards start on the new page's heading, as after a page load.
    document.getElementById('page-title')?.focus();
  }, [page]);
  const nav = (
    <nav aria-label="Console">
      <ul>
        {PAGES.filter((p) => offered(p.path, session.user)).map((p) => (
          <li>
            <a
              href={`${BASE}/${p.path}`}
              aria-current={p.path === page ? 'page' : undefined}
              onClick={followInConsole(() => navigate(p.path))}
            >
              {p.title}
              {p.path === 'tools' && drift ? <NavCount count={drift} /> : null}
            </a>
          </li>
        ))}
      </ul>
    </nav>
  );
  return (
    <Frame session={session} nav={nav}>
      {current ? (
        <current.Page key={current.path} user={session.user} />
      ) : (
        <section class="page">
          <h1 id="page-title" tabIndex={-1}>
            Not found
          </h1>
          <p>There is no console page at {location.pathname}.</p>
        </section>
      )}
    </Frame>
  );
}

const CONSENT_SIGN_IN =
  'An MCP client asks to connect to an agent of your organization. Sign in to see the request and answer it.';

/**
 * Where the service sends the browser after the identity provider. The fragment is read once and
 * dropped from the address (the code is single-use, and no history entry should keep it); a code
 * becomes a session and the console opens, a refusal is shown on the sign-in page.
 */
function SsoLanding() {
  const [refusal, setRefusal] = useState<string | undefined>(undefined);
  useEffect(() => {
    const fragment = new URLSearchParams(location.hash.slice(1));
    const code = fragment.get('code');
    history.replaceState(null, '', SSO_PATH);
    if (!code) {
      setRefusal(fragment.get('error_description') ?? 'the identity provider sent no sign-in back.');
      return;
    }
    // The console's address before the session: the signed-in console then opens there (the
    // consent page, request and all, when the sign-in started on it).
    history.replaceState(null, '', ssoReturnAddress());
    signInWithSsoCode(code).catch((failure) => {
      history.replaceState(null, '', SSO_PATH);
      setRefusal(messageOf(failure, { code: false }));
    });
  }, []);
  if (refusal === undefined)
    return (
      <main id="main" class="sign-in">
        <h1>Agent Gateway console</h1>
        <p role="status">Signing you in…</p>
      </main>
    );
  return <SignIn refusal={refusal} />;
}

function App() {
  const session = useSession();
  usePathChanges();
  if (onSsoPage()) return <SsoLanding />;
  // Signing in changes no address: the consent page's query, the request itself, is still there after it.
  if (onConsentPage()) {
    // The consent page has no navigation: the request is the whole page.
    return session ? (
      <Frame session={session}>
        <ConsentPage />
      </Frame>
    ) : (
      <SignIn intro={CONSENT_SIGN_IN} ended={whySessionEnded()} />
    );
  }
  if (onSignUpPage()) {
    if (!session) return <SignUpPage toSignIn={() => go(BASE)} />;
    // Signed in, the new admin just now: the console's home, not a sign-up form.
    history.replaceState(null, '', BASE);
  }
  return session ? <Console session={session} /> : <SignIn ended={whySessionEnded()} />;
}

render(<App />, document.getElementById('app')!);
