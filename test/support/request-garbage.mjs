// A process of its own for test/young-garbage.test.ts, run with --expose-gc: the service (jest's
// build of src/) on an embedded database, and one kind of request sent again and again through
// yoga's fetch. Prints the bytes the old generation grew by per request, over rounds in which
// young-generation collections are forced often: what a request's objects left behind when they
// outlived two of them.
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import v8 from 'node:v8';

const build = process.env.AGW_TEST_SERVICE_BUILD;
const load = (file) => import(pathToFileURL(path.join(build, file)).href);
const { createApp } = await load('app.js');
const { openDatabase } = await load('db/database.js');
const { parseEnv } = await load('env.js');
const { createLogger } = await load('logger.js');

const env = parseEnv({ ...process.env, LOG_LEVEL: 'silent', DATABASE_URL: '', METRICS_PORT: '0' });
const db = await openDatabase({ dataDir: 'memory://' });
const app = createApp({ env, db, logger: createLogger('silent') });
await app.ready;

const call = async (method, path, body, headers = {}) => {
  const response = await app.yoga.fetch(`http://localhost${path}`, {
    method,
    headers: { 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  if (response.status >= 300) throw new Error(`${method} ${path} answered ${response.status}: ${text}`);
  return text ? JSON.parse(text) : undefined;
};

// An operator's request: an org signed up and its admin signed in; ORG in the request is its id.
const given = JSON.parse(process.env.REQUEST);
let headers = {};
let request = given;
if (given.operator) {
  const email = 'admin@garbage.example';
  const org = await call('POST', '/api/v1/orgs', {
    name: 'Garbage',
    slug: 'garbage',
    admin_email: email,
    admin_password: 'correct horse battery staple',
  });
  const { access_token } = await call('POST', '/api/v1/auth/login', {
    email,
    password: 'correct horse battery staple',
  });
  headers = { authorization: `Bearer ${access_token}` };
  await call('PATCH', `/api/v1/orgs/${org.org_id}`, { operator_rate_limit_per_minute: 1_000_000 }, headers);
  request = JSON.parse(JSON.stringify(given).replaceAll('ORG', org.org_id));
}
const send = () => call(request.method, request.path, request.body, headers);
const oldSpace = () => v8.getHeapSpaceStatistics().find((space) => space.space_name === 'old_space').space_used_size;

// Warmed up first: what the optimizer and the caches keep for good is not counted.
for (let i = 0; i < 300; i++) await send();
const perRequest = [];
for (let round = 0; round < 5; round++) {
  gc();
  gc({ type: 'minor' });
  gc({ type: 'minor' });
  const before = oldSpace();
  for (let i = 0; i < 100; i++) {
    await send();
    if (i % 10 === 9) gc({ type: 'minor' });
  }
  gc({ type: 'minor' });
  gc({ type: 'minor' });
  perRequest.push((oldSpace() - before) / 100);
}
console.log(JSON.stringify({ perRequest }));
await app.stop();
await db.close();
