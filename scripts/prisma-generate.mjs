// `prisma generate` insists on a schema-engine binary path although it never runs it, and the
// engine cannot be downloaded on offline build machines; any executable satisfies the check.
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const env = { ...process.env };
env.PRISMA_SCHEMA_ENGINE_BINARY ??= process.execPath;
env.PRISMA_HIDE_UPDATE_MESSAGE = '1';
// Generators such as prisma-pothos-types are found on PATH, as under `npx`.
const bin = fileURLToPath(new URL('../node_modules/.bin', import.meta.url));
env.PATH = `${bin}${path.delimiter}${env.PATH ?? ''}`;
const cli = fileURLToPath(new URL('../node_modules/prisma/build/index.js', import.meta.url));
const result = spawnSync(process.execPath, [cli, 'generate'], { stdio: 'inherit', env });
process.exit(result.status ?? 1);
