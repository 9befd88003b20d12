// Lists the longest functions under src/ (or the folders given), longest first:
//   node scripts/function-lengths.mjs [--top N] [folder ...]
// A function is any function declaration, method, arrow or function expression; its length is
// its own lines, from signature to closing brace less the lines of the functions it defines
// (a service factory that only defines methods is short; each method counts on its own). Used to
// review the structure, not by the tests.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';

const args = process.argv.slice(2);
const topAt = args.indexOf('--top');
const top = topAt >= 0 ? Number(args.splice(topAt, 2)[1]) : 15;
const roots = args.length ? args : ['src'];

function* sourceFiles(dir) {
  for (const name of readdirSync(dir)) {
    const full = path.join(dir, name);
    if (name === 'generated' || name === 'node_modules') continue;
    if (statSync(full).isDirectory()) yield* sourceFiles(full);
    else if (/\.tsx?$/.test(name) && !name.endsWith('.d.ts')) yield full;
  }
}

function nameOf(node) {
  if (node.name && ts.isIdentifier(node.name)) return node.name.text;
  const parent = node.parent;
  if (parent && (ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent)) && ts.isIdentifier(parent.name))
    return parent.name.text;
  return '(anonymous)';
}

const functions = [];
for (const root of roots) {
  for (const file of sourceFiles(root)) {
    const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
    const linesOf = (node) =>
      source.getLineAndCharacterOfPosition(node.getEnd()).line -
      source.getLineAndCharacterOfPosition(node.getStart()).line +
      1;
    // Returns the lines of the outermost functions under `node`, recording each function met.
    const visit = (node) => {
      if (ts.isFunctionLike(node) && 'body' in node && node.body) {
        let nested = 0;
        ts.forEachChild(node, (child) => {
          nested += visit(child);
        });
        const start = source.getLineAndCharacterOfPosition(node.getStart()).line;
        functions.push({ lines: linesOf(node) - nested, where: `${file}:${start + 1}`, name: nameOf(node) });
        return linesOf(node);
      }
      let inside = 0;
      ts.forEachChild(node, (child) => {
        inside += visit(child);
      });
      return inside;
    };
    visit(source);
  }
}
functions.sort((a, b) => b.lines - a.lines);
for (const f of functions.slice(0, top)) console.log(`${String(f.lines).padStart(5)}  ${f.name}  ${f.where}`);
const over = (n) => functions.filter((f) => f.lines > n && f.name !== '(anonymous)').length;
console.log(`named functions over 40 lines: ${over(40)}, over 80: ${over(80)}`);
