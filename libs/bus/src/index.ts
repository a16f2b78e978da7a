export * from './append.js';
export * from './connection.js';
export * from './lease-log.js';
export * from './local-server.js';
export * from './projection.js';
export * from './server-version.js';
export * from './snapshots.js';
export * from './stream.js';
