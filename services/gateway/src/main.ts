// Process entry of the gateway. It is an empty shell until its issue lands.
console.error('gateway: not implemented yet');
process.exitCode = 1;
