/**
 * @lease/leasectl: the operators' CLI. `runLeasectl(argv, io)` runs one command line and
 * returns its exit code (main.ts is the process around it); the pure pieces are exported
 * for tests and for other tools.
 */
export { EXIT, type ExitCode, type Io, runLeasectl } from './cli.js';
export * from './format.js';
export { audit, readLog, replayAt } from './log.js';
