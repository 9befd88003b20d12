import { createServer } from 'node:http';
import { createApp } from './app.js';
import { openDatabase } from './db/database.js';
import { parseEnv } from './env.js';
import { createLogger } from './logger.js';

const env = parseEnv();
const logger = createLogger(env.logLevel);

const db = await openDatabase({ databaseUrl: env.databaseUrl, dataDir: env.dataDir });
const app = createApp({ env, db, logger });
await app.ready;
const server = createServer(app.yoga);
server.keepAliveTimeout = 5000;

server.listen(env.port, env.host, () => {
  const base = env.publicUrl;
  logger.info(
    { graphiql: `${base}/graphql`, docs: `${base}/docs`, database: `${db.kind} ${db.location}` },
    `Agent Gateway listening on ${base} (GraphiQL ${base}/graphql, API docs ${base}/docs, database ${db.kind} ${db.location})`,
  );
});

let stopping = false;
async function shutdown(signal: string) {
  if (stopping) return;
  stopping = true;
  logger.info({ signal }, 'shutting down: draining requests');
  app.setDraining();
  const stopped = app.stop();
  const forced = setTimeout(() => server.closeAllConnections(), env.shutdownGraceMs);
  forced.unref();
  await new Promise<void>((resolve) => {
    server.close(() => resolve());
    server.closeIdleConnections();
  });
  clearTimeout(forced);
  await stopped;
  await db.close();
  logger.info('stopped');
  process.exit(0);
}

process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
