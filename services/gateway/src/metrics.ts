import type { LeaseErrorCode } from '@lease/events';

/** Counters the gateway reports through the NATS services STATS verb. */
export class GatewayMetrics {
  grants = 0;
  renewals = 0;
  releases = 0;
  revocations = 0;
  /** Appends JetStream rejected because another writer got in first (then decided again). */
  conflicts = 0;
  /** Appends retried after an uncertain failure (no acknowledgement). */
  uncertainRetries = 0;
  /** Group-commit appends, and the grants they carried. */
  admissionAppends = 0;
  readonly rejections = new Map<LeaseErrorCode, number>();

  reject(code: LeaseErrorCode): void {
    this.rejections.set(code, (this.rejections.get(code) ?? 0) + 1);
  }

  snapshot(extra: Record<string, unknown>): Record<string, unknown> {
    return {
      grants: this.grants,
      renewals: this.renewals,
      releases: this.releases,
      revocations: this.revocations,
      conflicts: this.conflicts,
      uncertainRetries: this.uncertainRetries,
      admissionAppends: this.admissionAppends,
      rejections: Object.fromEntries(this.rejections),
      ...extra,
    };
  }
}
