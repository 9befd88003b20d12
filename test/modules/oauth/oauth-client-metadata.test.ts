/**
 * Client ID Metadata Documents (docs/decisions/0047-mcp-oauth.md): a client_id that is a URL is
 * resolved by fetching the document it names, through the outbound address policy, with a size
 * and time cap, held to the registration rules, and kept a while. The documents are served by a
 * real local HTTP server; OAUTH_CLIENT_METADATA_LOOPBACK lets the service fetch from it, as the
 * docs say tests may, and without it the same URLs are refused.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { LOOPBACK_UPSTREAMS, startTestApp, type TestApp } from '../../support/app.js';

let documents: http.Server;
let docBase: string;
const hits: string[] = [];
const served = new Map<string, (res: http.ServerResponse) => void>();
let t: TestApp;
let strict: TestApp;

const document = (path: string, extra: Record<string, unknown> = {}) => ({
  client_id: `${docBase}${path}`,
  client_name: 'Doc client',
  redirect_uris: ['http://127.0.0.1:5555/callback'],
  ...extra,
});
const serveJson = (path: string, body: unknown) =>
  served.set(path, (res) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body)));

beforeAll(async () => {
  documents = http.createServer((req, res) => {
    hits.push(req.url!);
    const handler = served.get(req.url!);
    if (handler) handler(res);
    else res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => documents.listen(0, '127.0.0.1', resolve));
  docBase = `http://127.0.0.1:${(documents.address() as AddressInfo).port}`;
  t = await startTestApp({ ...LOOPBACK_UPSTREAMS, OAUTH_CLIENT_METADATA_LOOPBACK: 'true' });
  strict = await startTestApp({}, { db: t.database.db });
});

afterAll(async () => {
  await strict?.app.stop();
  await t?.close();
  documents.closeAllConnections();
  await new Promise((resolve) => documents.close(resolve));
});

const resolve = (app: TestApp, clientId: string) => app.app.services.oauth.resolveClient(clientId);
const hitsOf = (path: string) => hits.filter((h) => h === path).length;

test('a document that names itself is the client it describes, fetched once and then kept', async () => {
  serveJson('/good.json', document('/good.json', { unknown: 'ignored', logo_uri: 'https://client.example/logo.png' }));
  const first = await resolve(t, `${docBase}/good.json`);
  expect(first).toEqual({
    client: {
      client_id: `${docBase}/good.json`,
      kind: 'metadata_document',
      registration: {
        client_name: 'Doc client',
        redirect_uris: ['http://127.0.0.1:5555/callback'],
        logo_uri: 'https://client.example/logo.png',
      },
    },
  });
  expect(await resolve(t, `${docBase}/good.json`)).toEqual(first);
  expect(hitsOf('/good.json')).toBe(1);
});

test.each([
  ['/other-id.json', () => serveJson('/other-id.json', document('/someone-else.json')), /does not name itself/],
  [
    '/bad-redirect.json',
    () =>
      serveJson('/bad-redirect.json', document('/bad-redirect.json', { redirect_uris: ['http://client.example/cb'] })),
    /refused: .*loopback/,
  ],
  [
    '/secret.json',
    () => serveJson('/secret.json', document('/secret.json', { token_endpoint_auth_method: 'client_secret_basic' })),
    /public/,
  ],
  ['/not-json.json', () => served.set('/not-json.json', (res) => res.writeHead(200).end('<html>')), /not JSON/],
  [
    '/big.json',
    () => serveJson('/big.json', document('/big.json', { client_uri: `https://client.example/${'x'.repeat(6000)}` })),
    /exceeds 5120 bytes/,
  ],
  [
    '/moved.json',
    () => served.set('/moved.json', (res) => res.writeHead(302, { location: '/good.json' }).end()),
    /redirect \(302\)/,
  ],
  ['/missing.json', () => undefined, /answered 404/],
])('%s is refused with a reason', async (path, setUp, reason) => {
  setUp();
  const outcome = await resolve(t, `${docBase}${path}`);
  expect(outcome).toEqual({ unknown: expect.stringMatching(reason) });
  // A refusal is kept for a minute too: asking again does not fetch again.
  await resolve(t, `${docBase}${path}`);
  expect(hitsOf(path)).toBe(1);
});

test('a document that does not answer in time is refused after the time cap', async () => {
  served.set('/slow.json', () => undefined);
  const started = Date.now();
  expect(await resolve(t, `${docBase}/slow.json`)).toEqual({
    unknown: expect.stringMatching(/No response within 3000 ms/),
  });
  // The cap is 3 s; a generous upper bound only catches a hang.
  expect(Date.now() - started).toBeLessThan(20_000);
});

test('a URL without a path is refused before anything is fetched', async () => {
  const before = hits.length;
  expect(await resolve(t, `${docBase}/`)).toEqual({ unknown: expect.stringMatching(/must have a path/) });
  expect(hits.length).toBe(before);
});

test('without OAUTH_CLIENT_METADATA_LOOPBACK: an http client id is not a URL client, and an https one on a private address is never fetched', async () => {
  serveJson('/strict.json', document('/strict.json'));
  expect(await resolve(strict, `${docBase}/strict.json`)).toEqual({
    unknown: expect.stringMatching(/not registered here/),
  });
  const port = (documents.address() as AddressInfo).port;
  for (const host of ['127.0.0.1', '10.0.0.1', '[::1]', '169.254.169.254']) {
    const outcome = await resolve(strict, `https://${host}:${port}/strict.json`);
    expect({ host, outcome }).toEqual({
      host,
      outcome: { unknown: expect.stringMatching(/could not be fetched: .*(private|loopback|link-local|reserved)/i) },
    });
  }
  expect(hitsOf('/strict.json')).toBe(0);
});

test('with OAUTH_CLIENT_METADATA_LOOPBACK but loopback not in OUTBOUND_PRIVATE_NETWORKS, a loopback document is never fetched', async () => {
  const unopened = await startTestApp({ OAUTH_CLIENT_METADATA_LOOPBACK: 'true' }, { db: t.database.db });
  try {
    serveJson('/unopened.json', document('/unopened.json'));
    expect(await resolve(unopened, `${docBase}/unopened.json`)).toEqual({
      unknown: expect.stringMatching(/could not be fetched: .*OUTBOUND_PRIVATE_NETWORKS/),
    });
    expect(hitsOf('/unopened.json')).toBe(0);
  } finally {
    await unopened.app.stop();
  }
});

test('a registered client resolves from the database; an unknown id does not', async () => {
  const registered = await t.request('POST', '/oauth/register', {
    body: { client_name: 'reg', redirect_uris: ['https://reg.example/cb'] },
  });
  expect(await resolve(t, registered.body.client_id)).toEqual({
    client: {
      client_id: registered.body.client_id,
      kind: 'registered',
      registration: { client_name: 'reg', redirect_uris: ['https://reg.example/cb'] },
    },
  });
  expect(await resolve(t, 'agc_nope')).toEqual({ unknown: expect.stringMatching(/not registered/) });
});

test('the authorization endpoint counts the documents it fetches per client address (OAUTH_CLIENT_DOCUMENTS_PER_ADDRESS); a kept one costs nothing', async () => {
  const limited = await startTestApp(
    { ...LOOPBACK_UPSTREAMS, OAUTH_CLIENT_METADATA_LOOPBACK: 'true', OAUTH_CLIENT_DOCUMENTS_PER_ADDRESS: '3' },
    { db: t.database.db },
  );
  try {
    const authorize = (path: string, clientAddress: string) =>
      limited.request(
        'GET',
        `/oauth/authorize?${new URLSearchParams({ client_id: `${docBase}${path}`, redirect_uri: 'http://127.0.0.1:5555/callback' })}`,
        { clientAddress },
      );
    for (const path of ['/counted-1.json', '/counted-2.json', '/counted-3.json']) {
      serveJson(path, document(path));
      // Known client and redirect URI, no PKCE: back to the client with invalid_request, after the fetch.
      expect((await authorize(path, '198.51.100.20')).status).toBe(302);
    }
    expect((await authorize('/counted-1.json', '198.51.100.20')).status).toBe(302);
    serveJson('/counted-4.json', document('/counted-4.json'));
    const refused = await authorize('/counted-4.json', '198.51.100.20');
    expect(refused.status).toBe(429);
    expect(refused.body).toEqual({
      error: 'temporarily_unavailable',
      error_description: expect.stringMatching(/metadata documents/),
    });
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(hitsOf('/counted-4.json')).toBe(0);
    expect((await authorize('/counted-4.json', '198.51.100.21')).status).toBe(302);
    expect(hitsOf('/counted-4.json')).toBe(1);
  } finally {
    await limited.app.stop();
  }
});
