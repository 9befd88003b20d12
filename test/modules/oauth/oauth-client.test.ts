import { acceptRegistration, redirectUriMatches, redirectUriProblem } from '../../../src/modules/oauth/oauth-client.js';

test.each([
  'https://client.example/cb',
  'https://client.example:8443/cb?x=1',
  'http://127.0.0.1:6274/callback',
  'http://[::1]:33418/',
  'http://localhost:3334/oauth/callback',
])('%s may be a redirect URI', (uri) => {
  expect(redirectUriProblem(uri)).toBeUndefined();
});

test.each([
  ['http://client.example/cb', /loopback/],
  ['http://127.0.0.2/cb', /loopback/],
  ['http://localhost.evil.example/cb', /loopback/],
  ['https://client.example/cb#x', /fragment/],
  ['https://client.example/cb#', /fragment/],
  ['cursor://anysphere.cursor-mcp/oauth/callback', /scheme cursor/],
  ['data:text/html,hi', /scheme data/],
  ['', /non-empty/],
  [`https://client.example/${'a'.repeat(2000)}`, /at most 2000/],
])('%s may not be a redirect URI', (uri, problem) => {
  expect(redirectUriProblem(uri)).toMatch(problem);
});

test('a presented redirect URI matches exactly, except the port on the loopback interface (RFC 8252 §7.3)', () => {
  const registered = ['https://client.example/cb', 'http://127.0.0.1:6274/callback', 'http://localhost/oauth/callback'];
  expect(redirectUriMatches(registered, 'https://client.example/cb')).toBe(true);
  expect(redirectUriMatches(registered, 'http://127.0.0.1:50123/callback')).toBe(true);
  expect(redirectUriMatches(registered, 'http://localhost:41000/oauth/callback')).toBe(true);
  // Anything else differs: path, query, host, scheme, a port off loopback.
  expect(redirectUriMatches(registered, 'https://client.example/cb/')).toBe(false);
  expect(redirectUriMatches(registered, 'https://client.example/cb?x=1')).toBe(false);
  expect(redirectUriMatches(registered, 'https://client.example:444/cb')).toBe(false);
  expect(redirectUriMatches(registered, 'https://evil.example/cb')).toBe(false);
  expect(redirectUriMatches(registered, 'http://127.0.0.1:50123/other')).toBe(false);
  expect(redirectUriMatches(registered, 'http://localhost:6274/callback')).toBe(false);
  expect(redirectUriMatches(registered, 'not a url')).toBe(false);
});

test('a registration keeps the known string fields, drops the unknown ones and duplicate redirect URIs', () => {
  expect(
    acceptRegistration({
      redirect_uris: ['https://a.example/cb', 'https://a.example/cb'],
      client_name: 'A',
      software_id: 'a-cli',
      contacts: ['x@example.com'],
      jwks: { keys: [] },
    }),
  ).toEqual({ redirect_uris: ['https://a.example/cb'], client_name: 'A', software_id: 'a-cli' });
  expect(acceptRegistration({ redirect_uris: ['https://a.example/cb'], client_name: 5 })).toEqual({
    error: 'invalid_client_metadata',
    error_description: 'client_name must be a string',
  });
  expect(acceptRegistration(null)).toMatchObject({ error: 'invalid_client_metadata' });
});
