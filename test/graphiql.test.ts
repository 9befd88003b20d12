/**
 * GraphiQL at GET /graphql over a real socket: compressed after Accept-Encoding (brotli, gzip,
 * identity), an ETag per encoding and `Cache-Control: no-cache`, so a revisit is a 304; and the
 * page still works: it opens with a document whose operations run as they are written.
 */
import { request as httpRequest, createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { brotliCompressSync, brotliDecompressSync, constants, gunzipSync } from 'node:zlib';
import { parse, validate } from 'graphql';
import { schema } from '../src/http/schema.js';
import { chooseEncoding, GRAPHIQL_DEFAULT_QUERY } from '../src/http/graphiql-page.js';
import { startTestApp, type TestApp } from './support/app.js';

let t: TestApp;
let server: Server;
let port: number;

beforeAll(async () => {
  t = await startTestApp();
  server = createServer(t.app.yoga);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
});

afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
  await t.close();
});

interface RawResponse {
  status: number;
  headers: IncomingHttpHeaders;
  /** The bytes on the wire, not decoded. */
  body: Buffer;
}

/** A GET of /graphql as a browser sends it, with raw bytes back (no client-side decoding). */
function getPage(headers: Record<string, string> = {}): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: '127.0.0.1',
        port,
        path: '/graphql',
        headers: { accept: 'text/html,application/xhtml+xml,*/*;q=0.8', ...headers },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end();
  });
}

const MB = 1024 * 1024;

test('Accept-Encoding negotiation', () => {
  expect(chooseEncoding(null)).toBe('identity');
  expect(chooseEncoding('')).toBe('identity');
  expect(chooseEncoding('gzip, deflate, br, zstd')).toBe('br');
  expect(chooseEncoding('gzip')).toBe('gzip');
  expect(chooseEncoding('br;q=0.5, gzip')).toBe('gzip');
  expect(chooseEncoding('br;q=0, gzip;q=0')).toBe('identity');
  expect(chooseEncoding('*')).toBe('br');
  expect(chooseEncoding('deflate')).toBe('identity');
  expect(chooseEncoding('GZIP;Q=0.8')).toBe('gzip');
  expect(chooseEncoding('identity;q=0, gzip;q=0.1')).toBe('gzip');
  // Everything refused: identity anyway (a 406 would leave the browser with nothing).
  expect(chooseEncoding('identity;q=0')).toBe('identity');
  expect(chooseEncoding('identity, gzip;q=0.5')).toBe('identity');
});

test('brotli when accepted: a fraction of the page, cacheable, and the same page', async () => {
  const plain = await getPage();
  expect(plain.status).toBe(200);
  expect(plain.headers['content-encoding']).toBeUndefined();
  expect(plain.headers['content-type']).toBe('text/html; charset=utf-8');
  const html = plain.body.toString('utf8');
  expect(html).toContain('<title>Agent Gateway GraphiQL</title>');
  // The default document, as the page's options carry it (JSON in a script).
  expect(html).toContain(JSON.stringify(GRAPHIQL_DEFAULT_QUERY).slice(1, -1));
  expect(plain.body.length).toBeGreaterThan(5 * MB);

  const br = await getPage({ 'accept-encoding': 'gzip, deflate, br, zstd' });
  expect(br.status).toBe(200);
  expect(br.headers['content-encoding']).toBe('br');
  expect(Number(br.headers['content-length'])).toBe(br.body.length);
  expect(br.body.length).toBeLessThan(2.2 * MB);
  expect(br.body.length).toBeLessThan(plain.body.length / 4);
  expect(brotliDecompressSync(br.body).equals(plain.body)).toBe(true);
  expect(br.headers['cache-control']).toBe('no-cache');
  expect(br.headers.vary).toBe('Accept, Accept-Encoding');
  expect(br.headers['x-request-id']).toMatch(/^req_/);

  const gzip = await getPage({ 'accept-encoding': 'gzip' });
  expect(gzip.headers['content-encoding']).toBe('gzip');
  expect(gzip.body.length).toBeLessThan(2.6 * MB);
  expect(gunzipSync(gzip.body).equals(plain.body)).toBe(true);

  // One strong ETag per encoding (different bytes), all of one page.
  const tags = [plain, br, gzip].map((r) => r.headers.etag);
  expect(new Set(tags).size).toBe(3);
  for (const tag of tags) expect(tag).toMatch(/^"[A-Za-z0-9_-]{22}(-br|-gzip)?"$/);
});

test('a revisit with the ETag is a 304 without a body; another ETag gets the page', async () => {
  const first = await getPage({ 'accept-encoding': 'br' });
  const etag = first.headers.etag!;
  const revisit = await getPage({ 'accept-encoding': 'br', 'if-none-match': etag });
  expect(revisit.status).toBe(304);
  expect(revisit.body.length).toBe(0);
  expect(revisit.headers.etag).toBe(etag);
  expect(revisit.headers['cache-control']).toBe('no-cache');
  // Weak comparison, lists and `*`, as RFC 9110 says for If-None-Match.
  expect((await getPage({ 'accept-encoding': 'br', 'if-none-match': `"x", W/${etag}` })).status).toBe(304);
  expect((await getPage({ 'accept-encoding': 'br', 'if-none-match': '*' })).status).toBe(304);
  const stale = await getPage({ 'accept-encoding': 'br', 'if-none-match': '"an-older-page"' });
  expect(stale.status).toBe(200);
  expect(stale.body.equals(first.body)).toBe(true);
  // A gzip copy does not revalidate a brotli one: different bytes.
  expect((await getPage({ 'accept-encoding': 'gzip', 'if-none-match': etag })).status).toBe(200);
});

test('compressed once: later requests send the kept bytes without compressing again', async () => {
  const plain = await getPage();
  await getPage({ 'accept-encoding': 'br' });
  const elapsedMs = async (work: () => unknown) => {
    const started = process.hrtime.bigint();
    await work();
    return Number(process.hrtime.bigint() - started) / 1e6;
  };
  // What one compression costs on this machine, now (the service's quality and window).
  const compressMs = await elapsedMs(() =>
    brotliCompressSync(plain.body, {
      params: { [constants.BROTLI_PARAM_QUALITY]: 6, [constants.BROTLI_PARAM_SIZE_HINT]: plain.body.length },
    }),
  );
  // The fastest of five: a garbage collection or the other test files on these cores can stall
  // any one request, not all five, while a service that compressed again would pay the
  // compression on every one of them.
  const perRequestMs: number[] = [];
  for (let i = 0; i < 5; i++) perRequestMs.push(await elapsedMs(() => getPage({ 'accept-encoding': 'br' })));
  // Sending the kept 2 MB on loopback costs a small part of compressing 9 MB again.
  expect(Math.min(...perRequestMs)).toBeLessThan(compressMs / 2);
});

test('GraphQL clients on /graphql are not given the page', async () => {
  const response = await t.request('GET', '/graphql?query=%7B__typename%7D', {
    headers: { accept: 'application/json' },
  });
  expect(response.status).toBe(200);
  expect(response.body).toEqual({ data: { __typename: 'Query' } });
});

describe('the document GraphiQL opens with', () => {
  test('is valid against the schema', () => {
    expect(validate(schema, parse(GRAPHIQL_DEFAULT_QUERY))).toEqual([]);
  });

  test('runs as written: Login, then Agents and Records with the token in the Authorization header', async () => {
    // The org the comment's curl command signs up.
    const signUp = await t.request('POST', '/api/v1/orgs', {
      body: { name: 'Acme', slug: 'acme', admin_email: 'ops@acme.example', admin_password: 'a long passphrase' },
    });
    expect(signUp.status).toBe(201);
    const login = await t.request('POST', '/graphql', {
      body: { query: GRAPHIQL_DEFAULT_QUERY, operationName: 'Login' },
    });
    expect(login.body.errors).toBeUndefined();
    const token = login.body.data.login.access_token;
    expect(login.body.data.login.user).toEqual({
      email: 'ops@acme.example',
      role: 'admin',
      org_id: signUp.body.org_id,
    });
    for (const operationName of ['Agents', 'Records']) {
      const anonymous = await t.request('POST', '/graphql', { body: { query: GRAPHIQL_DEFAULT_QUERY, operationName } });
      expect(anonymous.status).toBe(401);
      const response = await t.request('POST', '/graphql', {
        headers: { Authorization: `Bearer ${token}` },
        body: { query: GRAPHIQL_DEFAULT_QUERY, operationName },
      });
      expect({ operationName, errors: response.body.errors }).toEqual({ operationName, errors: undefined });
    }
  });

  test('explains the Authorization header and how to get a token', () => {
    expect(GRAPHIQL_DEFAULT_QUERY).toContain('{"Authorization": "Bearer <access_token>"}');
    expect(GRAPHIQL_DEFAULT_QUERY).toContain('mutation Login');
    expect(GRAPHIQL_DEFAULT_QUERY).toContain('/api/v1/orgs');
    // The page template inserts the options with String.replace: `$` sequences would be expanded.
    expect(GRAPHIQL_DEFAULT_QUERY).not.toContain('$');
  });
});
