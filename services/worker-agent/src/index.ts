/**
 * @lease/worker-agent: runs workloads under leases and ends their whole process tree the
 * moment a lease is lost (docs/worker-agent.md, ADR 0008). The daemon (createWorkerAgent),
 * the one-shot mode (lease-agent run), and the pieces both are made of.
 */
export { createWorkerAgent, type WorkerAgent } from './agent.js';
export { type AgentConfig, loadAgentConfig } from './config.js';
export { parseDurationMs } from './duration.js';
export { EXIT, exitCodeForOutcome, exitCodeForStartError } from './exit-codes.js';
export { type JobsFile, JobsFileV1, loadJobsFile, type ResolvedWorkload, resolveWorkload } from './jobs.js';
export { groupAlive, groupMembers, isRunning, procStat, terminateGroup } from './process-group.js';
export * from './protocol.js';
export { openStateDir, type RunRecord, type StateDir } from './state.js';
export { leaseIdOf, type Run, type RunSpec, startRun } from './supervise.js';
