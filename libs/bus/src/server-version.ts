import type { NatsConnection } from '@nats-io/transport-node';

/**
 * The oldest nats-server the coordinator trusts (DESIGN.md, "What the engine can and
 * cannot promise here"). scripts/ensure-nats.sh holds the same number.
 */
export const MIN_NATS_SERVER_VERSION = '2.10.23';

interface ParsedVersion {
  readonly core: readonly [number, number, number];
  /** "RC.1" in "2.11.0-RC.1"; a pre-release sorts before its release. */
  readonly preRelease: string | undefined;
}

const VERSION_PATTERN = /^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$/;

const parseVersion = (version: string): ParsedVersion | undefined => {
  const match = VERSION_PATTERN.exec(version.trim());
  if (!match) return undefined;
  return { core: [Number(match[1]), Number(match[2]), Number(match[3])], preRelease: match[4] };
};

/**
 * Compares two `major.minor.patch` versions (a leading "v" and a pre-release suffix are
 * accepted): negative when a < b, 0 when equal, positive when a > b. Throws on a string
 * that is not a version, because guessing would let a bad server through.
 */
export const compareVersions = (a: string, b: string): number => {
  const left = parseVersion(a);
  const right = parseVersion(b);
  if (!left || !right) throw new Error(`not a version: ${JSON.stringify(left ? b : a)}`);
  for (let i = 0; i < 3; i++) {
    const diff = left.core[i]! - right.core[i]!;
    if (diff !== 0) return Math.sign(diff);
  }
  if (left.preRelease === right.preRelease) return 0;
  if (left.preRelease === undefined) return 1;
  if (right.preRelease === undefined) return -1;
  return left.preRelease < right.preRelease ? -1 : 1;
};

const WHAT_TO_DO =
  `Upgrade to nats-server ${MIN_NATS_SERVER_VERSION} or newer (an official release binary, a package ` +
  'manager, or the nats:2.10 container image); on a development machine `bash scripts/ensure-nats.sh` ' +
  'fetches a suitable server into .tools/ (or point NATS_SERVER_BIN at one).';

/** Why a given old version is refused, most specific first. */
const whyTooOld = (version: string): string => {
  if (compareVersions(version, '2.10.0') < 0) {
    return (
      'nats-server 2.9.x acknowledges several concurrent compare-and-appends carrying the same ' +
      'Nats-Expected-Last-Subject-Sequence on a replicated stream (nats-server issue #4320), so two ' +
      'writers could both win and a limit could be oversubscribed.'
    );
  }
  return (
    'nats-server 2.10.20 to 2.10.22 lost acknowledged writes on crash-restart (found by Jepsen, fixed in ' +
    '2.10.23), and releases before them are not the ones the guarantees were measured on.'
  );
};

/**
 * Refuses a server older than MIN_NATS_SERVER_VERSION, with a message saying why and
 * what to do. The coordinator's safety rests on the server's compare-and-append and on
 * acknowledged writes surviving a crash, both broken in older releases.
 */
export const assertServerVersion = (version: string): void => {
  if (parseVersion(version) === undefined) {
    throw new Error(
      `cannot tell the nats-server version from ${JSON.stringify(version)}; the coordinator needs ` +
        `${MIN_NATS_SERVER_VERSION} or newer. ${WHAT_TO_DO}`,
    );
  }
  if (compareVersions(version, MIN_NATS_SERVER_VERSION) >= 0) return;
  throw new Error(
    `nats-server ${version} is older than ${MIN_NATS_SERVER_VERSION}, the oldest this coordinator trusts. ` +
      `Why: ${whyTooOld(version)} ${WHAT_TO_DO}`,
  );
};

/** Checks the version the server announced in its INFO when the connection was made. */
export const checkConnectedServer = (nc: NatsConnection): void => {
  const version = nc.info?.version;
  if (version === undefined) {
    throw new Error('the NATS connection carries no server INFO, so the server version cannot be checked');
  }
  assertServerVersion(version);
};
