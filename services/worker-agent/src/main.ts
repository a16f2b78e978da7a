// Process entry of the worker-agent. It is an empty shell until its issue lands.
console.error('worker-agent: not implemented yet');
process.exitCode = 1;
