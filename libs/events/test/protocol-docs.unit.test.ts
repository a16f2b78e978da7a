import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ERROR_CODES } from '../src/errors.js';
import { JSON_SCHEMA_GROUPS, jsonSchemas, jsonSchemaText } from '../src/json-schemas.js';
import * as commands from '../src/schemas/commands.v1.js';
import * as events from '../src/schemas/events.v1.js';
import * as replies from '../src/schemas/replies.v1.js';
import { COMMAND_SUBJECTS } from '../src/subjects.js';

/**
 * docs/protocol.md and docs/events.md are all a client in another language has, so they
 * are checked against the code: every schema, subject and error code is named, every
 * example parses with its schema, and the generated JSON Schemas are current. Each check
 * is a pure function of the text, and the last block shows that each one can fail.
 */
const root = join(import.meta.dirname, '../../..');
const read = (path: string) => readFileSync(join(root, path), 'utf8');
const protocol = read('docs/protocol.md');
const eventsDoc = read('docs/events.md');

type Module = Record<string, unknown>;

/** The exported zod schemas of a module whose names end in V1: what the wire is made of. */
const v1Schemas = (module: Module): Record<string, z.ZodType> =>
  Object.fromEntries(
    Object.entries(module).filter(([name, value]) => name.endsWith('V1') && value instanceof z.ZodType),
  ) as Record<string, z.ZodType>;

const requestSchemas = v1Schemas(commands);
const replySchemas = v1Schemas(replies);
const eventSchemas = v1Schemas(events);

/** Names not written as code (`Name`) in the text. */
const unnamed = (doc: string, names: readonly string[]) =>
  names.filter((name) => !doc.includes(`\`${name}\``));

/** Names without a link to their generated file, e.g. [`AcquireRequestV1`](schemas/requests/AcquireRequestV1.json). */
const unlinked = (doc: string, group: string, names: readonly string[]) =>
  names.filter((name) => !doc.includes(`[\`${name}\`](schemas/${group}/${name}.json)`));

/** The text of a `## Title` or `### title` section, up to the next heading of its level or above. */
const section = (doc: string, heading: string): string => {
  const start = doc.indexOf(`\n${heading}\n`);
  if (start < 0) return '';
  const level = heading.indexOf(' ');
  const rest = doc.slice(start + heading.length + 2);
  const end = rest.search(new RegExp(`\\n#{2,${level}} `));
  return end < 0 ? rest : rest.slice(0, end);
};

/** Verbs whose `### verb` section does not name the verb's subject. */
const verbsWithoutSubject = (doc: string) =>
  Object.entries(COMMAND_SUBJECTS)
    .filter(([verb, subject]) => !section(doc, `### ${verb}`).includes(`\`${subject}\``))
    .map(([verb]) => verb);

/** The `| \`CODE\` | yes/no | ...` rows of the "## Errors" section, as code to retryable. */
const errorTable = (doc: string): Record<string, boolean> =>
  Object.fromEntries(
    section(doc, '## Errors')
      .split('\n')
      .filter((line) => line.startsWith('| `'))
      .map((line) => line.split('|').map((cell) => cell.trim()))
      .map(([, code, retryable]) => [code!.replaceAll('`', ''), retryable === 'yes']),
  );

interface Example {
  readonly name: string;
  readonly text: string;
}

/** Fenced blocks tagged with the schema they show: ```json AcquireRequestV1. */
const examples = (doc: string): Example[] =>
  [...doc.matchAll(/^```json (\w+)\n([\s\S]*?)^```$/gm)].map((match) => ({
    name: match[1]!,
    text: match[2]!,
  }));

/** What a block tagged `name` must parse as: a request, a whole reply, or an event. */
const exampleSchema = (name: string): z.ZodType | undefined => {
  if (requestSchemas[name]) return requestSchemas[name];
  if (name === 'ErrorReplyV1') return replies.ErrorReplyV1;
  if (replySchemas[name]) return replies.okReply(replySchemas[name]);
  return eventSchemas[name];
};

/**
 * Examples that are not JSON, name no schema, or do not parse with it. Parsing strips
 * unknown keys, so the parsed value must also equal the example: a misspelt field fails.
 */
const badExamples = (doc: string): string[] =>
  examples(doc).flatMap(({ name, text }) => {
    const schema = exampleSchema(name);
    if (!schema) return [`${name}: no such schema`];
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch (error) {
      return [`${name}: not JSON (${(error as Error).message})`];
    }
    const parsed = schema.safeParse(json);
    if (!parsed.success) return [`${name}: ${parsed.error.issues.map((issue) => issue.message).join('; ')}`];
    return JSON.stringify(sortDeep(parsed.data)) === JSON.stringify(sortDeep(json))
      ? []
      : [`${name}: has fields its schema does not know`];
  });

const sortDeep = (value: unknown): unknown => {
  if (Array.isArray(value)) return value.map(sortDeep);
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(
    Object.keys(value)
      .sort()
      .map((key) => [key, sortDeep((value as Record<string, unknown>)[key])]),
  );
};

const withoutExample = (doc: string, names: readonly string[]) => {
  const shown = new Set(examples(doc).map((example) => example.name));
  return names.filter((name) => !shown.has(name));
};

/** Differences between the files under docs/schemas and what the zod schemas generate now. */
const schemaFileDrift = (onDisk: Record<string, string>, generated: Record<string, object>): string[] => [
  ...Object.entries(generated).flatMap(([file, schema]) =>
    onDisk[file] === undefined
      ? [`${file}: missing`]
      : onDisk[file] !== jsonSchemaText(schema)
        ? [`${file}: stale`]
        : [],
  ),
  ...Object.keys(onDisk)
    .filter((file) => !Object.hasOwn(generated, file))
    .map((file) => `${file}: no such schema`),
];

const schemaFilesOnDisk = (): Record<string, string> =>
  Object.fromEntries(
    JSON_SCHEMA_GROUPS.flatMap((group) => {
      let files: string[];
      try {
        files = readdirSync(join(root, 'docs/schemas', group));
      } catch {
        files = [];
      }
      return files
        .filter((file) => file.endsWith('.json'))
        .map((file) => [`${group}/${file}`, read(`docs/schemas/${group}/${file}`)]);
    }),
  );

const requestNames = Object.keys(requestSchemas);
const replyNames = Object.keys(replySchemas);
const eventNames = Object.keys(eventSchemas);
/** The events a message can be: the members of the union (GrantV1 is a part, the union the whole). */
const eventTypeNames = Object.entries(eventSchemas)
  .filter(([, schema]) => (events.LeaseEventV1.options as readonly unknown[]).includes(schema))
  .map(([name]) => name);

describe('the schema namespaces the checks iterate', () => {
  it('hold every request, reply and event schema', () => {
    // One request schema per verb.
    expect(requestNames).toHaveLength(Object.keys(COMMAND_SUBJECTS).length);
    expect(replyNames).toContain('ErrorReplyV1');
    expect(replyNames).toContain('AcquireResultV1');
    expect(eventTypeNames).toHaveLength(events.LeaseEventV1.options.length);
  });
});

describe('docs/protocol.md', () => {
  it('names every request and reply schema and links it to its JSON Schema file', () => {
    expect(unnamed(protocol, [...requestNames, ...replyNames])).toEqual([]);
    expect(unlinked(protocol, 'requests', requestNames)).toEqual([]);
    expect(unlinked(protocol, 'replies', replyNames)).toEqual([]);
  });

  it('names every command subject, each in the section of its verb', () => {
    expect(Object.values(COMMAND_SUBJECTS).filter((subject) => !protocol.includes(`\`${subject}\``))).toEqual(
      [],
    );
    expect(verbsWithoutSubject(protocol)).toEqual([]);
  });

  it('lists every error code with its retryable flag, and no other code', () => {
    const expected = Object.fromEntries(
      Object.entries(ERROR_CODES).map(([code, info]) => [code, info.retryable]),
    );
    expect(errorTable(protocol)).toEqual(expected);
  });

  it('shows an example of every request and result and of an error, each parsing with its schema', () => {
    expect(
      withoutExample(protocol, [
        ...requestNames,
        ...replyNames.filter((name) => name.endsWith('ResultV1')),
        'ErrorReplyV1',
      ]),
    ).toEqual([]);
    expect(badExamples(protocol)).toEqual([]);
  });
});

describe('docs/events.md', () => {
  it('names every event schema and links it to its JSON Schema file', () => {
    expect(unnamed(eventsDoc, eventNames)).toEqual([]);
    expect(unlinked(eventsDoc, 'events', eventNames)).toEqual([]);
  });

  it('shows an example of every event, each parsing with its schema', () => {
    expect(withoutExample(eventsDoc, eventTypeNames)).toEqual([]);
    expect(badExamples(eventsDoc)).toEqual([]);
  });
});

describe('docs/schemas', () => {
  it('holds exactly what z.toJSONSchema makes of the schemas now (run node scripts/gen-schemas.mjs)', () => {
    const generated = jsonSchemas();
    expect(Object.keys(generated).sort()).toEqual(
      [
        ...requestNames.map((name) => `requests/${name}.json`),
        ...replyNames.map((name) => `replies/${name}.json`),
        ...eventNames.map((name) => `events/${name}.json`),
      ].sort(),
    );
    expect(schemaFileDrift(schemaFilesOnDisk(), generated)).toEqual([]);
  });

  it('are JSON Schema draft 2020-12', () => {
    for (const schema of Object.values(jsonSchemas())) {
      expect(schema).toMatchObject({ $schema: 'https://json-schema.org/draft/2020-12/schema' });
    }
  });
});

describe('the checks themselves', () => {
  const [someRequest, someReply, someEvent] = [requestNames[0]!, replyNames[0]!, eventNames[0]!];
  const drop = (doc: string, text: string) => doc.replaceAll(text, 'REMOVED');

  it('miss a schema name or link that is not in the text', () => {
    expect(unnamed(drop(protocol, someRequest), requestNames)).toEqual([someRequest]);
    expect(unlinked(drop(protocol, `(schemas/replies/${someReply}.json)`), 'replies', replyNames)).toEqual([
      someReply,
    ]);
    expect(unnamed(drop(eventsDoc, someEvent), eventNames)).toEqual([someEvent]);
  });

  it('miss a subject that is not in its verb section', () => {
    expect(verbsWithoutSubject(drop(protocol, COMMAND_SUBJECTS.release))).toEqual(['release']);
  });

  it('see an error code missing or with the wrong flag', () => {
    const [code, info] = Object.entries(ERROR_CODES)[0]!;
    const flag = info.retryable ? 'yes' : 'no';
    const flipped = protocol.replace(
      new RegExp(`(\\| \`${code}\`\\s*\\| )${flag}`),
      `$1${info.retryable ? 'no' : 'yes'}`,
    );
    expect(errorTable(flipped)[code]).toBe(!info.retryable);
    expect(errorTable(drop(protocol, `\`${code}\``))).not.toHaveProperty(code);
  });

  it('refuse an example with a misspelt field, a wrong type, or no schema', () => {
    const doc = [
      '```json RenewRequestV1',
      '{ "leaseId": "l1", "holderSecret": "0123456789abcdef", "ttl": 5000 }',
      '```',
      '```json LeaseRenewedV1',
      '{ "type": "LeaseRenewed", "v": 1, "atMs": 1, "leaseId": "l1", "ttlMs": 1, "deadlineMs": 2, "extra": 1 }',
      '```',
      '```json LimitViewV1',
      '{ "ok": true, "result": { "limit": "a", "slotsMax": "8", "used": 0, "free": 8 } }',
      '```',
      '```json NoSuchV1',
      '{}',
      '```',
    ].join('\n');
    expect(badExamples(doc)).toHaveLength(4);
    expect(withoutExample(doc, ['RenewRequestV1', 'GetRequestV1'])).toEqual(['GetRequestV1']);
  });

  it('see a schema file that is stale, missing or left over', () => {
    const generated = jsonSchemas();
    const onDisk = Object.fromEntries(
      Object.entries(generated).map(([file, schema]) => [file, jsonSchemaText(schema)]),
    );
    expect(schemaFileDrift(onDisk, generated)).toEqual([]);
    const [first, second] = Object.keys(generated);
    const broken = { ...onDisk, [first!]: '{}\n', 'events/GoneV1.json': '{}\n' };
    delete broken[second!];
    expect(schemaFileDrift(broken, generated).sort()).toEqual(
      [`${first}: stale`, `${second}: missing`, 'events/GoneV1.json: no such schema'].sort(),
    );
  });
});
