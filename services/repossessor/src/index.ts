export * from './config.js';
export * from './deadline-index.js';
export * from './repossessor.js';
