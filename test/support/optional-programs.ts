/**
 * Programs some test files need beyond Node and the npm packages: browsers, a PostgreSQL server
 * package, PgBouncer. The README's test command must pass on a machine with only its stated
 * prerequisites, so without one of them the tests that need it are skipped with a notice naming
 * the install command; with `CI` set (`.ci/run` installs them all) a missing program is a failure.
 */
import { accessSync, constants } from 'node:fs';

/** The first executable of `candidates`; `override` (an environment variable's value), when set, is the only candidate. */
function firstExecutable(candidates: string[], override?: string): string | undefined {
  for (const candidate of override ? [override] : candidates) {
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // the next one
    }
  }
  return undefined;
}

/**
 * The program's path, or undefined after a notice on stderr (the test file skips its tests then).
 * Under CI, missing is an error.
 */
export function optionalProgram(
  what: string,
  candidates: string[],
  install: string,
  override?: { variable: string; value?: string },
): string | undefined {
  const found = firstExecutable(candidates, override?.value);
  if (found) return found;
  const named = override?.value ? ` (${override.variable}=${override.value} is not an executable)` : '';
  const message = `No ${what}${named}: install it with \`${install}\`${override ? ` or set ${override.variable}` : ''}`;
  if (process.env.CI) throw new Error(`${message}. CI needs it (.ci/run installs it).`);
  process.stderr.write(`skipping the tests that need ${what}. ${message}\n`);
  return undefined;
}

/** `test` when the program was found, `test.skip` when not. */
export const testWith = (program: string | undefined): jest.It => (program ? test : test.skip);
