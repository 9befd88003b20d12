import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import Provider, { type Configuration } from 'oidc-provider';

/**
 * A real OpenID provider for the single sign-on tests: panva's `oidc-provider` (an OpenID
 * certified implementation) on a loopback port, with its development login form. Its accounts are
 * a map the test edits: an account removed from it can no longer sign in, as a user removed from a
 * company's directory. Any password is accepted by the development form; the login is the account id.
 */

export interface TestAccount {
  email: string;
  email_verified?: boolean | string;
  groups?: string[];
}

export interface TestIdentityProvider {
  issuer: string;
  clientId: string;
  clientSecret: string;
  accounts: Map<string, TestAccount>;
  /** How many times each path was requested (discovery, JWKS, token). */
  hits: Map<string, number>;
  provider: Provider;
  close(): Promise<void>;
}

/**
 * The provider warns, rightly, that its development login form and in-memory storage are not for
 * production, and that it cannot guard its own fetches (a client metadata document) against
 * special-use addresses; in a test that is the point, and the warnings, some at its first request,
 * would only bury the test's output. Once per test file.
 */
function quietProviderWarnings() {
  const warn = console.warn as typeof console.warn & { quiet?: true };
  if (warn.quiet) return;
  console.warn = Object.assign(
    (...args: unknown[]) => {
      if (!String(args[0]).startsWith('oidc-provider WARNING')) warn(...args);
    },
    { quiet: true as const },
  );
}

/** A provider listening on a loopback port, with what each path was asked. */
export interface ServedProvider {
  issuer: string;
  provider: Provider;
  /** How many times each path was requested. */
  hits: Map<string, number>;
  close(): Promise<void>;
}

/**
 * Starts panva's provider on a free port of `host` with the configuration `configure` makes for
 * its issuer (`http://<host>:<port>`), counting the paths asked.
 */
export async function serveProvider(
  configure: (issuer: string) => Configuration,
  host = '127.0.0.1',
): Promise<ServedProvider> {
  const hits = new Map<string, number>();
  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const issuer = `http://${host}:${(server.address() as AddressInfo).port}`;
  quietProviderWarnings();
  const provider = new Provider(issuer, configure(issuer));
  const callback = provider.callback();
  server.on('request', (request, response) => {
    const path = new URL(request.url ?? '/', issuer).pathname;
    hits.set(path, (hits.get(path) ?? 0) + 1);
    callback(request, response);
  });
  return {
    issuer,
    provider,
    hits,
    close: () =>
      new Promise<void>((resolve) => {
        // The test's fetches keep connections alive; they would hold the server (and jest) open.
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** The provider's error page as plain text, so a test that fails there reads why. */
export const plainTextErrors: Configuration['renderError'] = (ctx, out) => {
  ctx.type = 'text/plain';
  ctx.body = `provider error: ${out.error}: ${out.error_description ?? ''}`;
};

export async function startIdentityProvider({
  redirectUri,
  clientId = 'agent-gateway',
  extra = {},
}: {
  redirectUri: string;
  clientId?: string;
  extra?: Partial<Configuration>;
}): Promise<TestIdentityProvider> {
  const clientSecret = randomBytes(24).toString('base64url');
  const accounts = new Map<string, TestAccount>();
  const served = await serveProvider(() => ({
    clients: [
      {
        client_id: clientId,
        client_secret: clientSecret,
        redirect_uris: [redirectUri],
        grant_types: ['authorization_code'],
        response_types: ['code'],
        token_endpoint_auth_method: 'client_secret_basic',
      },
    ],
    async findAccount(_ctx, id) {
      const account = accounts.get(id);
      if (!account) return undefined;
      return { accountId: id, claims: () => ({ sub: id, ...account }) };
    },
    claims: { openid: ['sub'], email: ['email', 'email_verified'], groups: ['groups'] },
    scopes: ['openid', 'email', 'profile', 'groups', 'offline_access'],
    // The claims in the ID token itself, as Okta, Entra ID, Keycloak and Google put them.
    conformIdTokenClaims: false,
    cookies: { keys: [randomBytes(16).toString('hex')] },
    features: { devInteractions: { enabled: true } },
    renderError: plainTextErrors,
    ttl: { AccessToken: 600, AuthorizationCode: 60, Grant: 3600, IdToken: 600, Interaction: 600, Session: 3600 },
    ...extra,
  }));
  return { ...served, clientId, clientSecret, accounts };
}

/** A cookie jar for one host: enough for the provider's interaction cookies. */
export class CookieJar {
  private readonly cookies = new Map<string, string>();
  take(response: Response): void {
    for (const line of response.headers.getSetCookie()) {
      const [pair, ...attributes] = line.split(';');
      const at = pair.indexOf('=');
      const name = pair.slice(0, at).trim();
      const value = pair.slice(at + 1).trim();
      const expired = attributes.some((a) => /^\s*max-age=0\s*$/i.test(a)) || value === '';
      if (expired) this.cookies.delete(name);
      else this.cookies.set(name, value);
    }
  }
  header(): string {
    return [...this.cookies].map(([name, value]) => `${name}=${value}`).join('; ');
  }
  get(name: string): string | undefined {
    return this.cookies.get(name);
  }
}

/**
 * Walks a browser through the provider from its authorization URL: the development login form
 * (as `login`), then the consent form, following every redirect, until the provider sends the
 * browser to `redirectUri`. Answers that URL (with `code`, `state` and `iss`, or an `error`).
 */
export async function signInAtProvider(authorizationUrl: string, login: string, redirectUri: string): Promise<URL> {
  const jar = new CookieJar();
  let next: { url: string; init: RequestInit } = { url: authorizationUrl, init: { method: 'GET' } };
  for (let step = 0; step < 20; step++) {
    const response = await fetch(next.url, {
      ...next.init,
      redirect: 'manual',
      headers: { ...(next.init.headers as Record<string, string>), cookie: jar.header() },
    });
    jar.take(response);
    const location = response.headers.get('location');
    if (location) {
      const target = new URL(location, next.url);
      if (target.href.startsWith(redirectUri)) return target;
      next = { url: target.href, init: { method: 'GET' } };
      continue;
    }
    const html = await response.text();
    const action = /<form[^>]*action="([^"]+)"/.exec(html)?.[1];
    const prompt = /name="prompt" value="(\w+)"/.exec(html)?.[1];
    if (response.status !== 200 || !action || !prompt)
      throw new Error(`the provider answered ${response.status} without a form: ${html.slice(0, 500)}`);
    const form =
      prompt === 'login' ? new URLSearchParams({ prompt, login, password: 'any' }) : new URLSearchParams({ prompt });
    next = {
      url: new URL(action.replace(/&amp;/g, '&'), next.url).href,
      init: {
        method: 'POST',
        body: form.toString(),
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
      },
    };
  }
  throw new Error('the provider never sent the browser back');
}
