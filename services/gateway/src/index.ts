export { Admission } from './adapters/admission.js';
export { LogWriter } from './adapters/log-writer.js';
export { Waiting } from './adapters/waiting.js';
export * from './config.js';
export * from './gateway.js';
export { createCommands, hashSecret } from './handlers/commands.js';
export { GatewayMetrics } from './metrics.js';
