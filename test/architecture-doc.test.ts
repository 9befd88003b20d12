/**
 * docs/architecture.md describes the folders as they are (docs/decisions/0065-one-layer-per-folder.md):
 * its modules table lists exactly the folders of src/modules/, and its layout names every folder
 * of src/.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const doc = readFileSync(path.join(root, 'docs/architecture.md'), 'utf8');
const foldersOf = (dir: string) =>
  readdirSync(path.join(root, dir), { withFileTypes: true })
    .filter((entry) => entry.isDirectory())
    .map((entry) => entry.name)
    .sort();

/** The text of a `## title` section, up to the next one. */
function section(title: string): string {
  const start = doc.indexOf(`\n## ${title}\n`);
  if (start < 0) throw new Error(`docs/architecture.md has no section "${title}"`);
  const end = doc.indexOf('\n## ', start + 1);
  return doc.slice(start, end < 0 ? undefined : end);
}

test('the modules table lists exactly the folders of src/modules/', () => {
  const rows = [...section('Modules').matchAll(/^\| `([a-z-]+)` +\|/gm)].map((match) => match[1]);
  expect(rows.length).toBe(new Set(rows).size);
  expect([...rows].sort()).toEqual(foldersOf('src/modules'));
});

test('the layout names every folder of src/', () => {
  const layout = section('Layout');
  const named = [...layout.matchAll(/^ {2}([a-z-]+(?:\/<domain>)?)\/ /gm)].map((match) => match[1].split('/')[0]);
  // Generated code is git-ignored and made by `npm run generate`.
  expect(named.sort()).toEqual(foldersOf('src').filter((name) => name !== 'generated'));
});
