export { Admission } from './adapters/admission.js';
export { LogWriter } from './adapters/log-writer.js';
export * from './config.js';
export * from './gateway.js';
export { hashSecret } from './handlers/commands.js';
export { GatewayMetrics } from './metrics.js';
