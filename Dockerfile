# Agent Gateway: build with TypeScript, run the compiled service on plain Node.
#
#   docker build -t agent-gateway .
#   docker run -p 8000:8000 -v agw-data:/data agent-gateway                 # embedded PGlite in /data
#   docker run -p 8000:8000 -e DATABASE_URL=postgresql://… agent-gateway    # PostgreSQL

############################ build ############################
FROM node:20-bookworm-slim AS build

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

# package.json `allowScripts` approves only argon2's install script, but the npm bundled with
# Node 20 (npm 10) does not read `allowScripts` and would run every dependency's install script
# (Prisma engine downloads, telemetry). So: no scripts during `npm ci`, then exactly the approved
# ones: argon2's native build and our own postinstall (`prisma generate`, offline).
RUN npm ci --ignore-scripts --no-audit --no-fund \
    && npm rebuild argon2 \
    && node scripts/prisma-generate.mjs

COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
# The operator console: typed operations from the committed SDL (codegen), bundled by esbuild
# into console/dist (what `prepare` does in an ordinary npm ci, skipped above with the scripts).
COPY codegen.ts ./
COPY schema ./schema
COPY console ./console
RUN npm run build \
    && npm run build:console \
    && npm prune --omit=dev --ignore-scripts --no-audit --no-fund

########################### runtime ###########################
FROM node:20-bookworm-slim AS runtime

ENV NODE_ENV=production \
    DATA_DIR=/data \
    PORT=8000

WORKDIR /app

# Owned by root and read-only for the service user; the only writable place is DATA_DIR.
COPY --from=build /app/package.json ./package.json
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
# Read from dist/http/console.js as ../../console/dist: the built files only.
COPY --from=build /app/console/dist ./console/dist
# Read at start from dist/db/migrate.js as ../../prisma/migrations, i.e. /app/prisma/migrations.
COPY --from=build /app/prisma ./prisma

# The embedded PGlite database (used when DATABASE_URL is not set). A named volume mounted here
# starts with this directory's owner and mode: writable by the service user, closed to others
# (PGlite creates its files world-writable, mode 0666).
RUN install -d -o node -g node -m 0700 /data
VOLUME /data

USER node
EXPOSE 8000

HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 8000) + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]

# Node as PID 1 receives SIGTERM directly: the service drains requests and closes the database.
CMD ["node", "dist/main.js"]
