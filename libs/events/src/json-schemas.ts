import { z } from 'zod';
import * as commands from './schemas/commands.v1.js';
import * as events from './schemas/events.v1.js';
import * as replies from './schemas/replies.v1.js';

/**
 * The JSON Schema catalogue of the wire (docs/schemas): one file per exported, versioned
 * zod schema. scripts/gen-schemas.mjs writes it and a unit test regenerates it in memory
 * and compares, so the checked-in files cannot drift from the zod schemas.
 */
export const JSON_SCHEMA_GROUPS = ['requests', 'replies', 'events'] as const;
export type JsonSchemaGroup = (typeof JSON_SCHEMA_GROUPS)[number];

const modules: Record<JsonSchemaGroup, Record<string, unknown>> = { requests: commands, replies, events };

/**
 * Requests are described as the gateway accepts them (zod's input side); replies and
 * events as they are written (the output side).
 */
const io: Record<JsonSchemaGroup, 'input' | 'output'> = {
  requests: 'input',
  replies: 'output',
  events: 'output',
};

/** `$schema` first, then the rest in code-unit order. */
const keyOrder = (a: string, b: string): number =>
  a === b ? 0 : a === '$schema' ? -1 : b === '$schema' ? 1 : a < b ? -1 : 1;

/** The exported zod schemas of one group whose names carry a version (`...V1`), by name. */
export const versionedSchemas = (group: JsonSchemaGroup): Record<string, z.ZodType> =>
  Object.fromEntries(
    Object.entries(modules[group])
      .filter(([name, value]) => /V\d+$/.test(name) && value instanceof z.ZodType)
      .sort(([a], [b]) => keyOrder(a, b)),
  ) as Record<string, z.ZodType>;

/** Object keys sorted at every depth, so that the files do not change with zod's key order. */
const sortKeys = (value: unknown): unknown => {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(
    Object.keys(value)
      .sort(keyOrder)
      .map((key) => [key, sortKeys((value as Record<string, unknown>)[key])]),
  );
};

/** Every schema's JSON Schema (draft 2020-12), keyed by its path under docs/schemas, e.g. `requests/AcquireRequestV1.json`. */
export const jsonSchemas = (): Record<string, object> =>
  Object.fromEntries(
    JSON_SCHEMA_GROUPS.flatMap((group) =>
      Object.entries(versionedSchemas(group)).map(([name, schema]) => [
        `${group}/${name}.json`,
        sortKeys(z.toJSONSchema(schema, { io: io[group] })) as object,
      ]),
    ),
  );

/** A schema file's exact text: 2-space JSON and a trailing newline. */
export const jsonSchemaText = (schema: object): string => `${JSON.stringify(schema, null, 2)}\n`;
