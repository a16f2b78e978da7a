/**
 * Durations on the command line: "500ms", "30s", "2m", "1h", or a bare number of
 * milliseconds. Integers only, so that what is asked is what is sent.
 */
const UNITS_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 } as const;

export const parseDurationMs = (text: string): number => {
  const match = /^(\d+)(ms|s|m|h)?$/.exec(text.trim());
  if (!match) throw new RangeError(`"${text}" is not a duration (e.g. 500ms, 30s, 2m, 1h)`);
  const value = Number(match[1]) * UNITS_MS[(match[2] ?? 'ms') as keyof typeof UNITS_MS];
  if (!Number.isSafeInteger(value)) throw new RangeError(`"${text}" is too long a duration`);
  return value;
};
