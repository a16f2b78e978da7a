export * from './append.js';
export * from './connection.js';
export * from './projection.js';
export * from './stream.js';
