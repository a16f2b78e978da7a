// Writes docs/schemas/{requests,replies,events}/<Name>.json from the zod schemas of
// @lease/events (zod 4's z.toJSONSchema, draft 2020-12), and deletes files of schemas
// that no longer exist. The generation itself lives in libs/events/src/json-schemas.ts,
// shared with the unit test that keeps the checked-in files current.
// Run after `tsc -b` (it imports the built package): node scripts/gen-schemas.mjs
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { JSON_SCHEMA_GROUPS, jsonSchemas, jsonSchemaText } from '@lease/events';

const outDir = join(import.meta.dirname, '..', 'docs', 'schemas');
const schemas = jsonSchemas();

let written = 0;
for (const [file, schema] of Object.entries(schemas)) {
  const path = join(outDir, file);
  const text = jsonSchemaText(schema);
  mkdirSync(dirname(path), { recursive: true });
  let current;
  try {
    current = readFileSync(path, 'utf8');
  } catch {
    current = undefined;
  }
  if (current === text) continue;
  writeFileSync(path, text);
  written += 1;
}

let removed = 0;
for (const group of JSON_SCHEMA_GROUPS) {
  for (const name of readdirSync(join(outDir, group))) {
    if (name.endsWith('.json') && !Object.hasOwn(schemas, `${group}/${name}`)) {
      rmSync(join(outDir, group, name));
      removed += 1;
    }
  }
}

console.log(`docs/schemas: ${Object.keys(schemas).length} schemas, ${written} written, ${removed} removed`);
