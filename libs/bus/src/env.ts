import type { z } from 'zod';

/**
 * A service's environment through its zod schema, once, at start: the parsed values, or
 * an Error naming every bad variable (the process fails fast with a readable message).
 */
export const parseEnv = <S extends z.ZodType>(
  schema: S,
  env: NodeJS.ProcessEnv,
  service: string,
): z.infer<S> => {
  const parsed = schema.safeParse(env);
  if (parsed.success) return parsed.data;
  const problems = parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`).join('; ');
  throw new Error(`${service} configuration is invalid: ${problems}`);
};

/** For a process entry: the config, or the reason it is invalid on stderr and exit code 78 (EX_CONFIG). */
export const configOrExit = <T>(load: () => T): T => {
  try {
    return load();
  } catch (error) {
    process.stderr.write(`${(error as Error).message}\n`);
    process.exit(78);
  }
};
