#!/usr/bin/env node
import { runLeasectl } from './cli.js';

/** Process entry: the command line in, an exit code out; SIGINT ends a tail cleanly. */
const interrupt = new AbortController();
process.once('SIGINT', () => interrupt.abort());

const code = await runLeasectl(process.argv.slice(2), {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
  errRaw: (text) => process.stderr.write(text),
  errIsTTY: process.stderr.isTTY === true,
  env: process.env,
  interrupt: interrupt.signal,
});
process.exit(code);
