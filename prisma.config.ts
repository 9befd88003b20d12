import { defineConfig } from 'prisma/config';

// Prisma 7 reads the connection from here for CLI commands (`migrate deploy`, `migrate diff`);
// the service itself connects through driver adapters (src/db/database.ts).
export default defineConfig({
  schema: 'prisma/schema.prisma',
  migrations: { path: 'prisma/migrations' },
  datasource: { url: process.env.DATABASE_URL ?? 'postgresql://localhost:5432/agent_gateway' },
});
