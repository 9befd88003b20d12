// What the two builds (scripts/build.mjs for dist/, scripts/build-console.mjs for console/dist/)
// share to skip work when their output is current: one hash over the inputs' paths and contents,
// and the stamp a build writes beside its output. Content, not modification times: a checkout, a
// stash or a copy changes times without changing sources, and an edit within the clock's
// resolution changes sources without changing times.
//
// Plain Node (no tsx, no dependencies): it runs on every start.
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const root = fileURLToPath(new URL('..', import.meta.url));

/** Relative paths (with `/`) of the files under `dir`, sorted; none when it does not exist. */
export function filesUnder(dir) {
  const full = path.join(root, dir);
  if (!existsSync(full)) return [];
  return readdirSync(full, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) =>
      path
        .relative(root, path.join(entry.parentPath ?? entry.path, entry.name))
        .split(path.sep)
        .join('/'),
    )
    .sort();
}

/** One hash over these files' paths and contents (a missing file counts as absent). */
export function hashOfFiles(files) {
  const hash = createHash('sha256');
  for (const file of files) {
    const full = path.join(root, file);
    const content = existsSync(full) ? createHash('sha256').update(readFileSync(full)).digest('hex') : 'absent';
    hash.update(`${file}\0${content}\n`);
  }
  return hash.digest('hex');
}

/** The stamp a build wrote (JSON), or undefined when there is none or it does not parse. */
export function readStamp(stampFile) {
  try {
    return JSON.parse(readFileSync(stampFile, 'utf8'));
  } catch {
    return undefined;
  }
}

/**
 * Why a build must run again, or undefined when its output is current: no stamp, other inputs,
 * or one of the files it wrote (paths relative to `outDir`) gone.
 */
export function stalenessOf({ stamp, inputs, outDir, outputs, outName }) {
  if (!stamp) return 'no build stamp';
  if (stamp.inputs !== inputs) return 'sources or configuration changed';
  const missing = outputs.find((file) => !existsSync(path.join(outDir, file)));
  if (missing) return `${outName}/${missing} is missing`;
  return undefined;
}
