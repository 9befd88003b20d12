# Agent Gateway: build with TypeScript, run the compiled service on plain Node.
#
#   docker build -t agent-gateway .
#   docker run -p 8000:8000 -v agw-data:/data agent-gateway                 # embedded PGlite in /data
#   docker run -p 8000:8000 -e DATABASE_URL=postgresql://… agent-gateway    # PostgreSQL

############################ build ############################
FROM node:24-bookworm-slim AS build

# argon2 falls back to a node-gyp build when no prebuilt binary fits the platform.
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 make g++ \
    && rm -rf /var/lib/apt/lists/*

# If argon2 has to be compiled, node-gyp uses the headers that ship with the image instead of
# downloading them.
ENV npm_config_nodedir=/usr/local

WORKDIR /app

# Dependencies first, so that source edits do not invalidate this layer. The postinstall
# (Prisma client generation into src/generated) needs the schema, the Prisma config and the script.
COPY package.json package-lock.json ./
COPY prisma.config.ts ./
COPY prisma ./prisma
COPY scripts ./scripts

# package.json `allowScripts` approves only argon2's install script; an npm that does not read
# `allowScripts` (before npm 11) would run every dependency's install script (Prisma engine
# downloads, telemetry). So, whatever npm the image has: no scripts during `npm ci`, then exactly
# the approved ones: argon2's native build and our own postinstall (`prisma generate`, offline).
RUN npm ci --ignore-scripts --no-audit --no-fund \
    && npm rebuild argon2 \
    && node scripts/prisma-generate.mjs

COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY bin ./bin
# The operator console: typed operations from the committed SDL (codegen), bundled by esbuild
# into console/dist (what `prepare` does in an ordinary npm ci, skipped above with the scripts).
COPY codegen.ts ./
COPY schema ./schema
COPY console ./console
# Then the production dependencies only. --omit=optional as well: the Prisma CLI and TypeScript are
# optional peer dependencies of @prisma/client, which npm keeps with --omit=dev alone (250 MB
# more); nothing the service runs is optional (docs/decisions/0046-production-install.md).
# scripts/check-production-install.mjs (in .ci/run) repeats these steps and this stage's COPY lines.
RUN npm run build \
    && npm run build:console \
    && npm prune --omit=dev --omit=optional --ignore-scripts --no-audit --no-fund

########################### runtime ###########################
FROM node:24-bookworm-slim AS runtime

# METRICS_HOST: the metrics listener (METRICS_PORT, 9464) on every interface of the container, so
# that a scraper outside it can reach it; the service's default, 127.0.0.1, is the container's own
# loopback. Let only the scraper's network reach 9464: do not publish it publicly
# (docs/operations.md#metrics).
ENV NODE_ENV=production \
    DATA_DIR=/data \
    PORT=8000 \
    METRICS_HOST=0.0.0.0

WORKDIR /app

# Owned by root and read-only for the service user; the only writable place is DATA_DIR.
COPY --from=build /app/package.json ./package.json
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
# The agent-gateway command on PATH (`docker exec <container> agent-gateway rotate-keys`): the
# package's bin, which runs dist/cli/agent-gateway.js (there is no src/ here to build from).
COPY --from=build /app/bin ./bin
RUN ln -s /app/bin/agent-gateway.js /usr/local/bin/agent-gateway
# Read from dist/http/console.js as ../../console/dist: the built files only.
COPY --from=build /app/console/dist ./console/dist
# Read from dist/http/docs.js as ../../console/icon.svg: /favicon.ico and the icon of the docs pages.
COPY --from=build /app/console/icon.svg ./console/icon.svg
# Read at start from dist/db/migrate.js as ../../prisma/migrations, i.e. /app/prisma/migrations.
COPY --from=build /app/prisma ./prisma

# The embedded PGlite database (used when DATABASE_URL is not set). A named volume mounted here
# starts with this directory's owner and mode: writable by the service user, closed to others
# (PGlite creates its files world-writable, mode 0666).
RUN install -d -o node -g node -m 0700 /data
VOLUME /data

USER node
EXPOSE 8000
# Metrics: for the scraper's network only.
EXPOSE 9464

HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 8000) + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]

# Node as PID 1 receives SIGTERM directly: the service drains requests and closes the database.
CMD ["node", "dist/main.js"]
