/**
 * The service's own arguments (src/command-line.ts acts on them): `--help`, `--version`, and
 * nothing else, so a typo or a CLI command given to the service is refused instead of starting a
 * service with defaults.
 */
import { readFileSync } from 'node:fs';
import { environmentUsage } from './env-usage.js';

const version: string = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')).version;

export function usage(): string {
  return `Usage: node dist/main.js [--help | --version]     (npm start builds and runs it; npm run dev runs src/)

Agent Gateway ${version}: a policy gateway between AI agents and the tools they act through.
Organizations sign up, operators approve agents' manifests and configure tools, and every agent
action is decided by policy, counted against budgets and recorded in a signed hash chain. Serves
GraphQL at /graphql (GraphiQL in a browser), REST at /api/v1 (/openapi.json, /docs, /redoc), MCP
at /mcp/{svc_id}, /healthz and /readyz. Configured by the environment only:

${environmentUsage()}

Offline commands (same environment, database or an export file):
  agent-gateway verify <export.jsonl> [--jwks <jwks.json>]          check a records export
  agent-gateway rotate-keys [<purpose>|all]                         new signing keys: record, capability,
                                                                    session, oauth, checkpoint
  agent-gateway reencrypt                                           seal secrets with KEY_ENCRYPTION_KEY
  agent-gateway create-org --name <n> --slug <s> --admin-email <e>  an organization and its admin
(npx agent-gateway in a checkout, which builds dist/ first when it is stale; agent-gateway in the
Docker image, where it is on PATH; agent-gateway <command> --help for details.) docs/walkthrough.md
walks through a first session with curl.
`;
}

/** What the arguments ask for: start the service, or print and exit with a status. */
export function commandLine(args: readonly string[]): { exit: number; stdout?: string; stderr?: string } | undefined {
  if (args.length === 0) return undefined;
  if (args.includes('--help') || args.includes('-h')) return { exit: 0, stdout: usage() };
  if (args.length === 1 && (args[0] === '--version' || args[0] === '-v')) return { exit: 0, stdout: `${version}\n` };
  const what = args[0].startsWith('-')
    ? `unknown option ${args[0]}`
    : `unexpected argument ${args[0]} (the service takes none)`;
  return { exit: 2, stderr: `agent-gateway: ${what}\n\n${usage()}` };
}

/**
 * The line the service logs once it listens, with its fields: where GraphiQL, the API docs and the
 * database are, and the console's URL only when the console is built (else that it is off).
 */
export function listeningLine(
  base: string,
  database: string,
  consoleBuilt: boolean,
): { fields: Record<string, string>; message: string } {
  const places = `GraphiQL ${base}/graphql, API docs ${base}/docs, database ${database}`;
  if (consoleBuilt) {
    return {
      fields: { graphiql: `${base}/graphql`, docs: `${base}/docs`, console: `${base}/console`, database },
      message: `Agent Gateway listening on ${base} (console ${base}/console, ${places})`,
    };
  }
  return {
    fields: { graphiql: `${base}/graphql`, docs: `${base}/docs`, console: 'off (not built in this install)', database },
    message: `Agent Gateway listening on ${base} (${places}); the operator console is off: not built in this install (npm run build:console in a full install)`,
  };
}
