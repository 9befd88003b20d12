/**
 * Go's golang.org/x/mod/sumdb/note and sumdb/tlog as the independent verifier of the records'
 * transparency log (test/support/tlog-verifier/main.go): checkpoints opened with a verifier key,
 * inclusion and consistency proofs checked. Debian's golang-go and golang-golang-x-mod-dev provide
 * them, built in GOPATH mode with no network.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { optionalProgram } from './optional-programs.js';

const verifierDir = fileURLToPath(new URL('./tlog-verifier', import.meta.url));
const GOPATH = '/usr/share/gocode';
export const go = optionalProgram(
  "Go with golang.org/x/mod's sources",
  existsSync(`${GOPATH}/src/golang.org/x/mod/sumdb/tlog`) ? ['/usr/bin/go', '/usr/lib/go/bin/go'] : [],
  'apt-get install golang-go golang-golang-x-mod-dev',
);

export interface GoInput {
  verifier_keys: string[];
  checkpoints?: string[];
  inclusions?: { record_hash: string; leaf_index: number; tree_size: number; root_hash: string; hashes: string[] }[];
  consistencies?: { from: number; to: number; from_root: string; to_root: string; hashes: string[] }[];
}
export interface GoOutput {
  checkpoints: { error?: string; origin?: string; size?: number; root?: string; signer?: string }[];
  inclusions: string[];
  consistencies: string[];
}

/** Runs the Go verifier (GOPATH mode on Debian's golang-golang-x-mod-dev: no network, no module download). */
export function goVerify(input: GoInput): Promise<GoOutput> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      go!,
      ['run', 'main.go'],
      {
        cwd: verifierDir,
        env: { ...process.env, GO111MODULE: 'off', GOPATH, GOFLAGS: '' },
        timeout: 120_000,
      },
      (error, stdout, stderr) =>
        error ? reject(new Error(`${error.message}\n${stderr}`)) : resolve(JSON.parse(stdout)),
    );
    child.stdin!.end(JSON.stringify({ checkpoints: [], inclusions: [], consistencies: [], ...input }));
  });
}
