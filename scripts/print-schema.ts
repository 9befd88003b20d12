// Writes schema/schema.graphql and schema/openapi.json from the code; test/contracts.test.ts fails
// when the committed files differ, so contract changes show up in review.
import { mkdir, writeFile } from 'node:fs/promises';
import { renderContracts } from '../src/contracts.js';

const dir = new URL('../schema/', import.meta.url);
await mkdir(dir, { recursive: true });
for (const [name, content] of Object.entries(renderContracts())) {
  await writeFile(new URL(name, dir), content);
  console.log(`wrote schema/${name}`);
}
