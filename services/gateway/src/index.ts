export * from './config.js';
export * from './gateway.js';
export { hashSecret } from './handlers/commands.js';
