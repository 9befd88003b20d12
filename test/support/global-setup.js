// Jest's global setup (once per run, before any worker): src/ as JavaScript for the tests that
// start the service or the command line as child processes. Through tsx every child compiled and
// loaded the TypeScript again, about 1.2 s of CPU a start (test/support/child-command.ts).
//
// esbuild transpiles file by file as tsx does (the same compiler, no bundling, no type check:
// that is `npm run typecheck`'s job). The output stands where dist/ stands in an installed
// package, so the service finds package.json, console/ and prisma/ one and two levels up: in
// .scratch/service-<hash>/, next to links to the checkout's files. The hash is of the sources:
// an unchanged tree reuses its build, and a concurrent run builds into its own directory first.
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import { filesUnder, hashOfFiles, root } from '../../scripts/build-stamp.mjs';

/** What the compiled service reads from its package's root, as src/ does from the checkout. */
const PACKAGE_FILES = ['package.json', 'console', 'prisma'];

export default async function buildServiceForTests() {
  const sources = filesUnder('src').filter((file) => file.endsWith('.ts'));
  const hash = hashOfFiles(['package-lock.json', ...sources]).slice(0, 16);
  const scratch = path.join(root, '.scratch');
  const target = path.join(scratch, `service-${hash}`);
  if (!existsSync(target)) {
    const partial = `${target}.${randomBytes(4).toString('hex')}`;
    mkdirSync(partial, { recursive: true });
    const esbuild = await import('esbuild');
    await esbuild.build({
      entryPoints: sources.map((file) => path.join(root, file)),
      outbase: path.join(root, 'src'),
      outdir: path.join(partial, 'dist'),
      format: 'esm',
      platform: 'node',
      target: 'node24',
      logLevel: 'warning',
    });
    for (const file of PACKAGE_FILES) symlinkSync(path.join(root, file), path.join(partial, file));
    try {
      renameSync(partial, target);
    } catch {
      // Another run built the same sources at the same time: its build is as good.
      rmSync(partial, { recursive: true, force: true });
    }
  }
  // Builds of sources that are gone.
  for (const entry of readdirSync(scratch)) {
    if (/^service-[0-9a-f]{16}$/.test(entry) && entry !== path.basename(target))
      rmSync(path.join(scratch, entry), { recursive: true, force: true });
  }
  process.env.AGW_TEST_SERVICE_BUILD = path.join(target, 'dist');
}
