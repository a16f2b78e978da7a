// Measurement aid, loaded only into a service process that a benchmark starts
// (`node --expose-gc --require bench/gc-probe.cjs ...`): on SIGUSR2 it runs a full garbage
// collection and logs the process's memory figures as one JSON line, so that a resident
// size read right after holds live data rather than garbage not yet collected.
process.on('SIGUSR2', () => {
  globalThis.gc?.();
  process.stdout.write(`${JSON.stringify({ msg: 'bench-gc', ...process.memoryUsage() })}\n`);
});
