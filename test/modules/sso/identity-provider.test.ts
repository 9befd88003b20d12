/**
 * The gateway's side of an OpenID provider (src/modules/sso/identity-provider.ts): discovery and
 * JWKS kept per process, the JWKS fetched again when a token names a key it lacks (at most once a
 * minute), and every check of an ID token's signature and claims. A local HTTP server plays the
 * provider, so the test controls its keys and counts its requests; the clock is the test's.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { SignJWT, exportJWK, generateKeyPair, type JWK, type KeyObject } from 'jose';
import {
  IdentityProviderError,
  JWKS_REFETCH_MIN_MS,
  createIdentityProviders,
  readDiscoveryDocument,
} from '../../../src/modules/sso/identity-provider.js';
import { PrivateNetworks } from '../../../src/lib/address-policy.js';

/** The test's provider is on loopback: the deployment opens it, as OUTBOUND_PRIVATE_NETWORKS=127.0.0.0/8 does. */
const loopbackOpened = PrivateNetworks.parse('127.0.0.0/8');

let server: http.Server;
let issuer: string;
let published: JWK[] = [];
const hits = new Map<string, number>();
let discovery: Record<string, unknown> = {};

interface SigningKey {
  kid: string;
  privateKey: KeyObject | CryptoKey;
  jwk: JWK;
}

async function newKey(kid: string, alg = 'RS256'): Promise<SigningKey> {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true });
  return { kid, privateKey, jwk: { ...(await exportJWK(publicKey)), kid, alg, use: 'sig' } };
}

beforeAll(async () => {
  server = http.createServer((req, res) => {
    hits.set(req.url!, (hits.get(req.url!) ?? 0) + 1);
    if (req.url === '/.well-known/openid-configuration') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(discovery));
    } else if (req.url === '/jwks') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: published }));
    } else res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  discovery = {
    issuer,
    authorization_endpoint: `${issuer}/authorize`,
    token_endpoint: `${issuer}/token`,
    jwks_uri: `${issuer}/jwks`,
    id_token_signing_alg_values_supported: ['RS256', 'ES256'],
  };
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

beforeEach(() => hits.clear());

const address = () => ({ issuer, allowPrivateNetwork: true });

function idToken(key: SigningKey, claims: Record<string, unknown> = {}, alg = 'RS256') {
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({ nonce: 'n', email: 'a@example.com', email_verified: true, ...claims })
    .setProtectedHeader({ alg, kid: key.kid })
    .setIssuer((claims.iss as string) ?? issuer)
    .setAudience((claims.aud as string | string[]) ?? 'client')
    .setSubject('user-1')
    .setIssuedAt(now)
    .setExpirationTime((claims.exp as number) ?? now + 300)
    .sign(key.privateKey);
}

test('discovery is fetched once and kept; a fresh read fetches again', async () => {
  const providers = createIdentityProviders({ privateNetworks: loopbackOpened });
  const first = await providers.metadata(address());
  expect(first).toMatchObject({
    issuer,
    jwks_uri: `${issuer}/jwks`,
    token_endpoint_auth_methods_supported: ['client_secret_basic'],
  });
  await providers.metadata(address());
  expect(hits.get('/.well-known/openid-configuration')).toBe(1);
  await providers.metadata(address(), true);
  expect(hits.get('/.well-known/openid-configuration')).toBe(2);
});

test('the provider must be allowed by the address policy: a loopback provider without allow_private_network is refused unasked', async () => {
  const providers = createIdentityProviders({ privateNetworks: loopbackOpened });
  await expect(providers.metadata({ issuer, allowPrivateNetwork: false })).rejects.toThrow(IdentityProviderError);
  expect(hits.size).toBe(0);
});

test('a loopback provider the deployment did not open (OUTBOUND_PRIVATE_NETWORKS) is refused unasked, even with allow_private_network', async () => {
  const providers = createIdentityProviders({ privateNetworks: PrivateNetworks.none });
  await expect(providers.metadata(address())).rejects.toThrow(/OUTBOUND_PRIVATE_NETWORKS/);
  expect(hits.size).toBe(0);
});

test('a discovery document for another issuer, or without its endpoints, is refused', () => {
  expect(readDiscoveryDocument({ ...discovery, issuer: 'https://other.example' }, issuer)).toContain(
    'names the issuer',
  );
  expect(readDiscoveryDocument({ issuer }, issuer)).toContain('authorization_endpoint');
  expect(readDiscoveryDocument([], issuer)).toContain('not a JSON object');
});

test('a token signed by a key the kept JWKS lacks fetches it again, at most once a minute', async () => {
  let now = 1_000_000;
  const providers = createIdentityProviders({ privateNetworks: loopbackOpened, now: () => now });
  const first = await newKey('k1');
  const second = await newKey('k2');
  published = [first.jwk];
  const metadata = await providers.metadata(address());
  await expect(providers.verifyIdToken(metadata, await idToken(first), 'client', true)).resolves.toMatchObject({
    sub: 'user-1',
  });
  expect(hits.get('/jwks')).toBe(1);

  // The provider rotates; the new key is unknown until the set is fetched again, which a minute
  // after the last fetch it is, on the first token that needs it.
  published = [first.jwk, second.jwk];
  now += JWKS_REFETCH_MIN_MS + 1;
  await expect(providers.verifyIdToken(metadata, await idToken(second), 'client', true)).resolves.toMatchObject({
    sub: 'user-1',
  });
  expect(hits.get('/jwks')).toBe(2);

  // Forged kids within the minute cost no request.
  const forged = await newKey('forged');
  for (let i = 0; i < 5; i++) {
    await expect(providers.verifyIdToken(metadata, await idToken(forged), 'client', true)).rejects.toThrow(
      /no applicable key/i,
    );
  }
  expect(hits.get('/jwks')).toBe(2);
  // A minute later the next unknown kid fetches once more (and is still refused: not published).
  now += JWKS_REFETCH_MIN_MS + 1;
  await expect(providers.verifyIdToken(metadata, await idToken(forged), 'client', true)).rejects.toThrow();
  expect(hits.get('/jwks')).toBe(3);
});

test('issuer, audience, expiry, algorithm and azp are checked', async () => {
  const providers = createIdentityProviders({ privateNetworks: loopbackOpened });
  const key = await newKey('rs');
  const ec = await newKey('ec', 'ES256');
  const ed = await newKey('ed', 'EdDSA');
  published = [key.jwk, ec.jwk, ed.jwk];
  const metadata = await providers.metadata(address());
  const verify = async (token: Promise<string>) => providers.verifyIdToken(metadata, await token, 'client', true);
  await expect(verify(idToken(ec, {}, 'ES256'))).resolves.toMatchObject({ sub: 'user-1' });
  await expect(verify(idToken(key, { iss: 'https://evil.example' }))).rejects.toThrow(/iss/);
  await expect(verify(idToken(key, { aud: 'someone-else' }))).rejects.toThrow(/aud/);
  await expect(verify(idToken(key, { exp: Math.floor(Date.now() / 1000) - 3600 }))).rejects.toThrow(/exp/);
  // EdDSA is a fine algorithm, but this provider does not announce it: refused.
  await expect(verify(idToken(ed, {}, 'EdDSA'))).rejects.toThrow(/alg/i);
  // Several audiences: the authorized party must be this client.
  await expect(verify(idToken(key, { aud: ['client', 'other'] }))).rejects.toThrow(/azp/);
  await expect(verify(idToken(key, { aud: ['client', 'other'], azp: 'client' }))).resolves.toMatchObject({
    azp: 'client',
  });
  // A symmetric token signed with anything: never accepted, whatever the provider announces.
  const hs = await new SignJWT({ nonce: 'n' })
    .setProtectedHeader({ alg: 'HS256', kid: 'rs' })
    .setIssuer(issuer)
    .setAudience('client')
    .setSubject('x')
    .setIssuedAt()
    .setExpirationTime('5m')
    .sign(new TextEncoder().encode('client-secret-client-secret-0123'));
  await expect(verify(Promise.resolve(hs))).rejects.toThrow();
});
