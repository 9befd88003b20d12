import { SignJWT, decodeJwt, decodeProtectedHeader, importJWK, jwtVerify, type JWK, type JWTPayload } from 'jose';
import { startTestApp, type TestApp } from '../../support/app.js';
import { createKey, createManifest, manifestPayload, signUp, type OrgFixture } from '../../support/fixtures.js';

/**
 * Capability tokens (docs/reference/gateway.md#capability-tokens): issuing, listing,
 * revoking, and how the gateway treats valid, narrowed, revoked, expired, forged and used-up tokens.
 */

let t: TestApp;
let org: OrgFixture;
let svcId: string;
let apiKey: string;

const iso = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
const capabilities = ['billing:read', 'billing:refund'];
const limits = { max_actions_per_hour: 1000, max_actions_per_day: 1000 };

beforeAll(async () => {
  t = await startTestApp();
  org = await signUp(t, 'captok');
  svcId = (await createManifest(t, org, 'active', manifestPayload({ capabilities, constraints: limits }))).svcId;
  const tool = await t.request('POST', `/api/v1/orgs/${org.orgId}/tools`, {
    token: org.adminToken,
    body: { action_type: 'billing', connector: 'mock', config: { response: { ok: true } } },
  });
  expect(tool.status).toBe(201);
  apiKey = (await createKey(t, org, ['gateway:execute'])).key;
});
afterAll(() => t.close());

const tokensPath = (o: OrgFixture = org) => `/api/v1/orgs/${o.orgId}/capability-tokens`;

async function issue(body: Record<string, unknown>, o: OrgFixture = org) {
  const response = await t.request('POST', tokensPath(o), { token: o.adminToken, body });
  if (response.status !== 201) throw new Error(`issue failed: ${response.status} ${response.text}`);
  return response.body as {
    token_id: string;
    token: string;
    svc_id: string;
    capabilities: string[];
    expires_at: string;
    max_uses: number | null;
  };
}

function execute(capabilityToken: string | undefined, tool = 'read', agent = svcId, key = apiKey) {
  return t.request('POST', '/api/v1/gateway/execute', {
    apiKey: key,
    body: {
      svc_id: agent,
      agent_id: agent,
      action: { type: 'billing', tool, params: { invoice: 'inv_1' } },
      ...(capabilityToken === undefined ? {} : { capability_token: capabilityToken }),
    },
  });
}

async function listed(tokenId: string) {
  const list = await t.request('GET', tokensPath(), { token: org.adminToken });
  expect(list.status).toBe(200);
  return list.body.items.find((item: { token_id: string }) => item.token_id === tokenId);
}

/** A deny is data: 200, not executed, no result, and exactly these reason codes. */
function expectDeny(response: Awaited<ReturnType<typeof execute>>, codes: string[]) {
  expect(response.status).toBe(200);
  expect(response.body).toMatchObject({ decision: 'deny', executed: false, result: null });
  expect(response.body.interaction_id).toEqual(expect.any(String));
  expect(response.body.reasons.map((r: { code: string }) => r.code)).toEqual(codes);
  for (const reason of response.body.reasons) expect(reason.message).toEqual(expect.any(String));
}

function expectAllow(response: Awaited<ReturnType<typeof execute>>) {
  expect(response.status).toBe(200);
  expect(response.body).toMatchObject({
    decision: 'allow',
    executed: true,
    reasons: [],
    result: { success: true, data: { ok: true } },
  });
}

/** Signs arbitrary claims with the gateway's real capability key (what a forger could not do). */
async function signWithCapabilityKey(claims: JWTPayload, header: Record<string, unknown> = {}) {
  const key = await t.app.keys.activeKey('capability');
  return new SignJWT(claims)
    .setProtectedHeader({ alg: 'EdDSA', typ: 'cap+jwt', kid: key.kid, ...header })
    .sign(key.privateKey);
}

const b64url = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');

describe('issuing', () => {
  test('201 with the token; an EdDSA cap+jwt with the documented claims, verifiable offline from the JWKS', async () => {
    const before = Math.floor(Date.now() / 1000);
    const response = await t.request('POST', tokensPath(), {
      token: org.adminToken,
      body: { svc_id: svcId, capabilities: ['billing:read'], expires_in_seconds: 600, max_uses: 5 },
    });
    const after = Math.floor(Date.now() / 1000);
    expect(response.status).toBe(201);
    expect(response.body).toEqual({
      token_id: expect.stringMatching(/^cap_[A-Za-z0-9_-]+$/),
      token: expect.stringMatching(/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/),
      svc_id: svcId,
      capabilities: ['billing:read'],
      expires_at: expect.stringMatching(iso),
      max_uses: 5,
    });
    const { token, token_id: tokenId } = response.body;

    const header = decodeProtectedHeader(token);
    expect(header).toEqual({ alg: 'EdDSA', typ: 'cap+jwt', kid: expect.any(String) });
    const claims = decodeJwt(token);
    expect(claims).toEqual({
      iss: expect.any(String),
      sub: svcId,
      aud: 'agent-gateway',
      org_id: org.orgId,
      cap: ['billing:read'],
      iat: expect.any(Number),
      nbf: expect.any(Number),
      exp: expect.any(Number),
      jti: tokenId,
      max_uses: 5,
    });
    expect(claims.iat).toBeGreaterThanOrEqual(before);
    expect(claims.iat).toBeLessThanOrEqual(after);
    expect(claims.nbf).toBe(claims.iat);
    expect(claims.exp! - claims.iat!).toBe(600);
    expect(new Date(response.body.expires_at).getTime()).toBe(claims.exp! * 1000);

    const jwks = await t.request('GET', '/.well-known/jwks.json');
    expect(jwks.status).toBe(200);
    const jwk = (jwks.body.keys as JWK[]).find((k) => k.kid === header.kid);
    expect(jwk).toBeDefined();
    expect(jwk).toMatchObject({ kty: 'OKP', crv: 'Ed25519', alg: 'EdDSA' });
    expect(jwk).not.toHaveProperty('d');
    const verified = await jwtVerify(token, await importJWK(jwk!, 'EdDSA'), {
      algorithms: ['EdDSA'],
      typ: 'cap+jwt',
      audience: 'agent-gateway',
      issuer: claims.iss,
      subject: svcId,
    });
    expect(verified.payload.jti).toBe(tokenId);
  });

  test('without max_uses the claim is absent and max_uses is null; duplicate capabilities collapse', async () => {
    const issued = await issue({
      svc_id: svcId,
      capabilities: ['billing:read', 'billing:refund', 'billing:read'],
      expires_in_seconds: 60,
    });
    expect(issued.max_uses).toBeNull();
    expect(issued.capabilities).toEqual(['billing:read', 'billing:refund']);
    const claims = decodeJwt(issued.token);
    expect(claims).not.toHaveProperty('max_uses');
    expect(claims.cap).toEqual(['billing:read', 'billing:refund']);
    expect(claims.exp! - claims.iat!).toBe(60);
  });

  test('expires_in_seconds may be the maximum, 2592000 (30 days)', async () => {
    const issued = await issue({ svc_id: svcId, capabilities: ['billing:read'], expires_in_seconds: 2_592_000 });
    const claims = decodeJwt(issued.token);
    expect(claims.exp! - claims.iat!).toBe(2_592_000);
  });

  test('capabilities the manifest requested but the approver left out are refused: 422 naming capabilities[i]', async () => {
    const base = `/api/v1/orgs/${org.orgId}/manifests`;
    const registered = await t.request('POST', base, {
      token: org.adminToken,
      body: manifestPayload({ capabilities: ['billing:read', 'billing:write'], constraints: limits }),
    });
    expect(registered.status).toBe(201);
    const approved = await t.request('POST', `${base}/${registered.body.manifest_id}/approve`, {
      token: org.adminToken,
      body: { approved_capabilities: ['billing:read'] },
    });
    expect(approved.status).toBe(200);
    const response = await t.request('POST', tokensPath(), {
      token: org.adminToken,
      body: {
        svc_id: registered.body.svc_id,
        capabilities: ['billing:read', 'billing:write'],
        expires_in_seconds: 600,
      },
    });
    expect(response.status).toBe(422);
    expect(response.body.error.code).toBe('VALIDATION_ERROR');
    expect(response.body.error.details.errors).toEqual([{ field: 'capabilities[1]', message: expect.any(String) }]);
  });

  test.each([
    [
      'a capability the manifest never requested',
      { capabilities: ['billing:read', 'email:send'] },
      ['capabilities[1]'],
    ],
    [
      'several unapproved capabilities',
      { capabilities: ['email:send', 'billing:read', 'billing:write'] },
      ['capabilities[0]', 'capabilities[2]'],
    ],
    ['no capabilities', { capabilities: [] }, ['capabilities']],
    ['expires_in_seconds 59', { expires_in_seconds: 59 }, ['expires_in_seconds']],
    ['expires_in_seconds 2592001', { expires_in_seconds: 2_592_001 }, ['expires_in_seconds']],
    ['expires_in_seconds 0', { expires_in_seconds: 0 }, ['expires_in_seconds']],
    ['max_uses 0', { max_uses: 0 }, ['max_uses']],
    ['max_uses -1', { max_uses: -1 }, ['max_uses']],
    ['an unknown svc_id', { svc_id: 'no-such-agent' }, ['svc_id']],
  ])('%s: 422 naming the field', async (_label, override, fields) => {
    const before = (await t.request('GET', tokensPath(), { token: org.adminToken })).body.total;
    const response = await t.request('POST', tokensPath(), {
      token: org.adminToken,
      body: { svc_id: svcId, capabilities: ['billing:read'], expires_in_seconds: 600, ...override },
    });
    expect(response.status).toBe(422);
    expect(response.body.error.code).toBe('VALIDATION_ERROR');
    expect(response.body.error.details.errors.map((e: { field: string }) => e.field)).toEqual(fields);
    expect((await t.request('GET', tokensPath(), { token: org.adminToken })).body.total).toBe(before);
  });

  test.each(['pending', 'suspended'] as const)(
    'an agent whose manifest is %s (not active): 422 naming svc_id',
    async (state) => {
      const { svcId: other } = await createManifest(
        t,
        org,
        state,
        manifestPayload({ capabilities, constraints: limits }),
      );
      const response = await t.request('POST', tokensPath(), {
        token: org.adminToken,
        body: { svc_id: other, capabilities: ['billing:read'], expires_in_seconds: 600 },
      });
      expect(response.status).toBe(422);
      expect(response.body.error.details.errors).toEqual([{ field: 'svc_id', message: expect.any(String) }]);
    },
  );

  test('an agent of another org is unknown here: 422 naming svc_id', async () => {
    const other = await signUp(t, 'captok-other');
    const { svcId: foreign } = await createManifest(
      t,
      other,
      'active',
      manifestPayload({ capabilities, constraints: limits }),
    );
    const response = await t.request('POST', tokensPath(), {
      token: org.adminToken,
      body: { svc_id: foreign, capabilities: ['billing:read'], expires_in_seconds: 600 },
    });
    expect(response.status).toBe(422);
    expect(response.body.error.details.errors.map((e: { field: string }) => e.field)).toEqual(['svc_id']);
  });
});

describe('listing and revoking', () => {
  test('the list shows the token without its text; revoke sets revoked_at once', async () => {
    const issued = await issue({
      svc_id: svcId,
      capabilities: ['billing:refund'],
      expires_in_seconds: 900,
      max_uses: 4,
    });
    const list = await t.request('GET', tokensPath(), { token: org.adminToken });
    expect(list.status).toBe(200);
    expect(list.body.total).toBe(list.body.items.length);
    expect(list.text).not.toContain(issued.token);
    expect(list.text).not.toContain(issued.token.split('.')[2]);
    for (const item of list.body.items) expect(item).not.toHaveProperty('token');
    const item = list.body.items.find((i: { token_id: string }) => i.token_id === issued.token_id);
    expect(item).toEqual({
      token_id: issued.token_id,
      svc_id: svcId,
      capabilities: ['billing:refund'],
      max_uses: 4,
      uses: 0,
      expires_at: issued.expires_at,
      revoked_at: null,
      created_at: expect.stringMatching(iso),
    });

    const revoked = await t.request('POST', `${tokensPath()}/${issued.token_id}/revoke`, { token: org.adminToken });
    expect(revoked.status).toBe(200);
    expect(revoked.body).toMatchObject({ token_id: issued.token_id, revoked_at: expect.stringMatching(iso) });
    expect(revoked.body).not.toHaveProperty('token');
    expect((await listed(issued.token_id)).revoked_at).toBe(revoked.body.revoked_at);

    const again = await t.request('POST', `${tokensPath()}/${issued.token_id}/revoke`, { token: org.adminToken });
    expect(again.status).toBe(200);
    expect(again.body.revoked_at).toBe(revoked.body.revoked_at);

    const [audits] = await t.database.db.sql.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM audit_logs WHERE org_id = $1 AND target_id = $2 AND action = 'capability_token.revoked'",
      [org.orgId, issued.token_id],
    );
    expect(Number(audits.n)).toBe(1);
  });

  test('revoking an unknown id, or another org’s token, is 404', async () => {
    const unknown = await t.request('POST', `${tokensPath()}/cap_doesnotexist/revoke`, { token: org.adminToken });
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.code).toBe('NOT_FOUND');

    const other = await signUp(t, 'captok-foreign');
    const { svcId: foreignSvc } = await createManifest(
      t,
      other,
      'active',
      manifestPayload({ capabilities, constraints: limits }),
    );
    const foreign = await issue({ svc_id: foreignSvc, capabilities: ['billing:read'], expires_in_seconds: 600 }, other);
    const crossOrg = await t.request(
      'POST',
      `/api/v1/orgs/${other.orgId}/capability-tokens/${foreign.token_id}/revoke`,
      {
        token: org.adminToken,
      },
    );
    expect(crossOrg.status).toBe(404);
    const viaOwnOrg = await t.request('POST', `${tokensPath()}/${foreign.token_id}/revoke`, { token: org.adminToken });
    expect(viaOwnOrg.status).toBe(404);
    const foreignList = await t.request('GET', tokensPath(other), { token: other.adminToken });
    expect(
      foreignList.body.items.find((i: { token_id: string }) => i.token_id === foreign.token_id).revoked_at,
    ).toBeNull();
  });
});

describe('the gateway with capability tokens', () => {
  test('without a token the manifest alone decides (baseline allow)', async () => {
    expectAllow(await execute(undefined));
  });

  test('a valid token granting the capability: allow, and one use is counted', async () => {
    const issued = await issue({ svc_id: svcId, capabilities: ['billing:read'], expires_in_seconds: 600 });
    const response = await execute(issued.token);
    expectAllow(response);
    expect((await listed(issued.token_id)).uses).toBe(1);
  });

  test('a token that does not grant the capability: CAPABILITY_NOT_IN_TOKEN, and no use is counted', async () => {
    const issued = await issue({ svc_id: svcId, capabilities: ['billing:refund'], expires_in_seconds: 600 });
    expectDeny(await execute(issued.token, 'read'), ['CAPABILITY_NOT_IN_TOKEN']);
    expect((await listed(issued.token_id)).uses).toBe(0);
    expectAllow(await execute(issued.token, 'refund'));
  });

  test('a revoked token: CAPABILITY_TOKEN_INVALID', async () => {
    const issued = await issue({ svc_id: svcId, capabilities: ['billing:read'], expires_in_seconds: 600 });
    expectAllow(await execute(issued.token));
    const revoked = await t.request('POST', `${tokensPath()}/${issued.token_id}/revoke`, { token: org.adminToken });
    expect(revoked.status).toBe(200);
    expectDeny(await execute(issued.token), ['CAPABILITY_TOKEN_INVALID']);
    expect((await listed(issued.token_id)).uses).toBe(1);
  });

  test('an expired token (same claims, signed by the gateway key, exp in the past): CAPABILITY_TOKEN_INVALID', async () => {
    const issued = await issue({ svc_id: svcId, capabilities: ['billing:read'], expires_in_seconds: 60 });
    const claims = decodeJwt(issued.token);
    const now = Math.floor(Date.now() / 1000);
    const expired = await signWithCapabilityKey({ ...claims, iat: now - 120, nbf: now - 120, exp: now - 60 });
    expect(decodeProtectedHeader(expired)).toEqual(decodeProtectedHeader(issued.token));
    // The control: the same re-signing with a future exp is accepted, so only `exp` differs.
    const control = await signWithCapabilityKey({ ...claims });
    const denied = await execute(expired);
    expectDeny(denied, ['CAPABILITY_TOKEN_INVALID']);
    expect(denied.body.reasons[0].message).toMatch(/exp/i);
    expectAllow(await execute(control));
  });

  test('a token whose stored row has expired is refused even while the JWT exp is still ahead', async () => {
    const issued = await issue({ svc_id: svcId, capabilities: ['billing:read'], expires_in_seconds: 600 });
    await t.database.db.sql.query(
      "UPDATE capability_tokens SET expires_at = now() - interval '1 minute' WHERE id = $1",
      [issued.token_id],
    );
    expectDeny(await execute(issued.token), ['CAPABILITY_TOKEN_INVALID']);
    expect((await listed(issued.token_id)).uses).toBe(0);
  });

  test('a tampered payload (claim changed, signature kept): CAPABILITY_TOKEN_INVALID', async () => {
    const issued = await issue({
      svc_id: svcId,
      capabilities: ['billing:refund'],
      expires_in_seconds: 600,
      max_uses: 1,
    });
    const [header, , signature] = issued.token.split('.');
    const claims = decodeJwt(issued.token);
    const widened = [header, b64url({ ...claims, cap: ['billing:read', 'billing:refund'] }), signature].join('.');
    expectDeny(await execute(widened, 'read'), ['CAPABILITY_TOKEN_INVALID']);
    const moreUses = [header, b64url({ ...claims, max_uses: 1000 }), signature].join('.');
    expectDeny(await execute(moreUses, 'refund'), ['CAPABILITY_TOKEN_INVALID']);
    expect((await listed(issued.token_id)).uses).toBe(0);
  });

  test('an unsigned token (alg: none): CAPABILITY_TOKEN_INVALID', async () => {
    const issued = await issue({ svc_id: svcId, capabilities: ['billing:read'], expires_in_seconds: 600 });
    const claims = decodeJwt(issued.token);
    const kid = decodeProtectedHeader(issued.token).kid;
    const none = `${b64url({ alg: 'none', typ: 'cap+jwt' })}.${b64url(claims)}.`;
    expectDeny(await execute(none), ['CAPABILITY_TOKEN_INVALID']);
    const noneWithKid = `${b64url({ alg: 'none', typ: 'cap+jwt', kid })}.${b64url(claims)}.`;
    expectDeny(await execute(noneWithKid), ['CAPABILITY_TOKEN_INVALID']);
    expect((await listed(issued.token_id)).uses).toBe(0);
  });

  test('an HS256 token, even with the real kid and the public key as the secret: CAPABILITY_TOKEN_INVALID', async () => {
    const issued = await issue({ svc_id: svcId, capabilities: ['billing:read'], expires_in_seconds: 600 });
    const claims = decodeJwt(issued.token);
    const kid = decodeProtectedHeader(issued.token).kid!;
    const secretSigned = await new SignJWT(claims)
      .setProtectedHeader({ alg: 'HS256', typ: 'cap+jwt', kid })
      .sign(new TextEncoder().encode('a shared secret nobody should accept'));
    expectDeny(await execute(secretSigned), ['CAPABILITY_TOKEN_INVALID']);

    const jwks = await t.request('GET', '/.well-known/jwks.json');
    const publicJwk = (jwks.body.keys as JWK[]).find((k) => k.kid === kid)!;
    const confused = await new SignJWT(claims)
      .setProtectedHeader({ alg: 'HS256', typ: 'cap+jwt', kid })
      .sign(new TextEncoder().encode(JSON.stringify(publicJwk)));
    expectDeny(await execute(confused), ['CAPABILITY_TOKEN_INVALID']);
    const confusedX = await new SignJWT(claims)
      .setProtectedHeader({ alg: 'HS256', typ: 'cap+jwt', kid })
      .sign(Buffer.from(publicJwk.x!, 'base64url'));
    expectDeny(await execute(confusedX), ['CAPABILITY_TOKEN_INVALID']);
  });

  test('signed by the real key but with the wrong audience, issuer or typ: CAPABILITY_TOKEN_INVALID', async () => {
    const issued = await issue({ svc_id: svcId, capabilities: ['billing:read'], expires_in_seconds: 600 });
    const claims = decodeJwt(issued.token);
    expectDeny(await execute(await signWithCapabilityKey({ ...claims, aud: 'other' })), ['CAPABILITY_TOKEN_INVALID']);
    expectDeny(await execute(await signWithCapabilityKey({ ...claims, iss: 'someone-else' })), [
      'CAPABILITY_TOKEN_INVALID',
    ]);
    expectDeny(await execute(await signWithCapabilityKey(claims, { typ: 'JWT' })), ['CAPABILITY_TOKEN_INVALID']);
    expect((await listed(issued.token_id)).uses).toBe(0);
    // The same claims, correctly typed, are accepted: the single changed field is what was refused.
    expectAllow(await execute(await signWithCapabilityKey(claims)));
  });

  test('a token whose jti is not a stored token: CAPABILITY_TOKEN_INVALID', async () => {
    const issued = await issue({ svc_id: svcId, capabilities: ['billing:read'], expires_in_seconds: 600 });
    const claims = decodeJwt(issued.token);
    expectDeny(await execute(await signWithCapabilityKey({ ...claims, jti: 'cap_never_issued' })), [
      'CAPABILITY_TOKEN_INVALID',
    ]);
  });

  test('a token issued for another agent of the org: CAPABILITY_TOKEN_INVALID', async () => {
    const { svcId: otherSvc } = await createManifest(
      t,
      org,
      'active',
      manifestPayload({ capabilities, constraints: limits }),
    );
    const forOther = await issue({ svc_id: otherSvc, capabilities: ['billing:read'], expires_in_seconds: 600 });
    const denied = await execute(forOther.token);
    expectDeny(denied, ['CAPABILITY_TOKEN_INVALID']);
    expect(denied.body.reasons[0].message).toContain(otherSvc);
    expectAllow(await execute(forOther.token, 'read', otherSvc));
  });

  test('a token of another org for an agent with the same svc_id: CAPABILITY_TOKEN_INVALID', async () => {
    const other = await signUp(t, 'captok-twin');
    await createManifest(t, other, 'active', manifestPayload({ svcId, capabilities, constraints: limits }));
    const foreign = await issue({ svc_id: svcId, capabilities: ['billing:read'], expires_in_seconds: 600 }, other);
    expect(decodeJwt(foreign.token).sub).toBe(svcId);
    expectDeny(await execute(foreign.token), ['CAPABILITY_TOKEN_INVALID']);
  });

  test('a session (bearer) token or garbage passed as capability_token: CAPABILITY_TOKEN_INVALID', async () => {
    expect(decodeProtectedHeader(org.adminToken).alg).toBe('EdDSA');
    expectDeny(await execute(org.adminToken), ['CAPABILITY_TOKEN_INVALID']);
    const session = decodeJwt(org.adminToken);
    // Session claims re-signed as a cap+jwt with the session kid still fail: the kid is for sessions.
    const sessionKey = await t.app.keys.activeKey('session');
    const retyped = await new SignJWT({
      ...session,
      sub: svcId,
      aud: 'agent-gateway',
      cap: ['billing:read'],
      org_id: org.orgId,
    })
      .setProtectedHeader({ alg: 'EdDSA', typ: 'cap+jwt', kid: sessionKey.kid })
      .sign(sessionKey.privateKey);
    expectDeny(await execute(retyped), ['CAPABILITY_TOKEN_INVALID']);
    expectDeny(await execute('not-a-jwt'), ['CAPABILITY_TOKEN_INVALID']);
  });

  test('the capability token is narrowed by the manifest: CAPABILITY_NOT_APPROVED stays a separate reason', async () => {
    const issued = await issue({ svc_id: svcId, capabilities: ['billing:read'], expires_in_seconds: 600 });
    const response = await t.request('POST', '/api/v1/gateway/execute', {
      apiKey,
      body: {
        svc_id: svcId,
        agent_id: svcId,
        action: { type: 'billing', tool: 'write', params: {} },
        capability_token: issued.token,
      },
    });
    expectDeny(response, ['CAPABILITY_NOT_APPROVED', 'CAPABILITY_NOT_IN_TOKEN']);
  });

  test('max_uses 2: two executes are allowed, the third is CAPABILITY_TOKEN_INVALID', async () => {
    const issued = await issue({ svc_id: svcId, capabilities: ['billing:read'], expires_in_seconds: 600, max_uses: 2 });
    expectAllow(await execute(issued.token));
    expectAllow(await execute(issued.token));
    expectDeny(await execute(issued.token), ['CAPABILITY_TOKEN_INVALID']);
    expect((await listed(issued.token_id)).uses).toBe(2);
  });

  test('max_uses 3 under 8 concurrent executes: exactly 3 are allowed', async () => {
    const issued = await issue({ svc_id: svcId, capabilities: ['billing:read'], expires_in_seconds: 600, max_uses: 3 });
    const responses = await Promise.all(Array.from({ length: 8 }, () => execute(issued.token)));
    for (const response of responses) expect(response.status).toBe(200);
    const allowed = responses.filter((r) => r.body.decision === 'allow');
    const denied = responses.filter((r) => r.body.decision === 'deny');
    expect(allowed).toHaveLength(3);
    for (const response of allowed) expectAllow(response);
    expect(denied).toHaveLength(5);
    for (const response of denied) expectDeny(response, ['CAPABILITY_TOKEN_INVALID']);
    expect((await listed(issued.token_id)).uses).toBe(3);
    const [records] = await t.database.db.sql.query<{ allowed: number; denied: number }>(
      `SELECT count(*) FILTER (WHERE status = 'approved')::int AS allowed, count(*) FILTER (WHERE status = 'denied')::int AS denied
       FROM interaction_records WHERE id = ANY($1)`,
      [responses.map((r) => r.body.interaction_id)],
    );
    expect({ allowed: Number(records.allowed), denied: Number(records.denied) }).toEqual({ allowed: 3, denied: 5 });
  });
});
