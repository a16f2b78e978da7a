// Process entry of the repossessor. It is an empty shell until its issue lands.
console.error('repossessor: not implemented yet');
process.exitCode = 1;
