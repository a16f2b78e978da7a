import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import {
  type NatsClusterHandle,
  type NatsServerHandle,
  startLocalCluster,
  startLocalNats,
  waitForClusterReady,
  waitForHealthz,
} from '@lease/bus';
import type { StartedNatsContainer } from '@testcontainers/nats';
import type { StartedNetwork } from 'testcontainers';
import { afterAll, beforeAll } from 'vitest';

/**
 * The one place where integration and end-to-end tests get a NATS server.
 *
 * LEASE_TEST_NATS chooses the backend:
 * - `local`: a nats-server process from libs/bus/src/local-server.ts (scripts/ensure-nats.sh);
 * - `container`: the nats:2.10 image through testcontainers;
 * - `auto` (default): the container when a Docker engine answers, else local.
 *
 * Every server started here is stopped by the caller (useNats/useNatsCluster do it in
 * afterAll); local processes still running when the test process exits are SIGKILLed by
 * local-server.ts, and containers are removed by testcontainers' reaper.
 */

export type { NatsClusterHandle, NatsServerHandle } from '@lease/bus';

export type NatsBackend = 'local' | 'container';

/**
 * A test worker ended by a signal dies without running 'exit' handlers, which would leave
 * its nats-server children running; exiting on the signal runs local-server.ts's cleanup.
 * Only where nothing else handles the signal, so that the runner's own handling wins.
 */
const EXIT_CODE_ON_SIGNAL = { SIGTERM: 143, SIGHUP: 129 } as const;
for (const [signal, code] of Object.entries(EXIT_CODE_ON_SIGNAL)) {
  if (process.listenerCount(signal) === 0) process.once(signal, () => process.exit(code));
}

export interface StartNatsOptions {
  /** fsync before acknowledging (`sync_interval: always`); local backend only, ignored by the container one. */
  readonly syncAlways?: boolean;
}

const BACKEND_ENV = 'LEASE_TEST_NATS';
const CONTAINER_IMAGE = 'nats:2.10';
const DOCKER_PROBE_TIMEOUT_MS = 5_000;
const CONTAINER_STARTUP_TIMEOUT_MS = 60_000;
const CONTAINER_READY_TIMEOUT_MS = 20_000;
const CONTAINER_STOP_GRACE_MS = 5_000;
const CONTAINER_KILL_WAIT_MS = 10_000;
const CLIENT_PORT = 4222;
const ROUTE_PORT = 6222;
const MONITOR_PORT = 8222;
const CONTAINER_STORE_DIR = '/data/jetstream';

export const startNats = async (options: StartNatsOptions = {}): Promise<NatsServerHandle> =>
  (await chooseBackend()) === 'container' ? startContainerNats() : startLocalNats(options);

export const startNatsCluster = async (
  size = 3,
  options: StartNatsOptions = {},
): Promise<NatsClusterHandle> =>
  (await chooseBackend()) === 'container'
    ? startContainerCluster(size)
    : startLocalCluster({ size, syncAlways: options.syncAlways });

/**
 * Starts a server before the suite's tests and stops it after them, also when they fail.
 * Returns an accessor because the server exists only once beforeAll has run.
 */
export const useNats = (options: StartNatsOptions = {}): (() => NatsServerHandle) => {
  let server: NatsServerHandle | undefined;
  beforeAll(async () => {
    server = await startNats(options);
  });
  afterAll(async () => {
    await server?.stop();
  });
  return () => {
    if (!server)
      throw new Error('useNats(): the server is available only inside tests and hooks after beforeAll');
    return server;
  };
};

/** useNats for a cluster. */
export const useNatsCluster = (size = 3, options: StartNatsOptions = {}): (() => NatsClusterHandle) => {
  let cluster: NatsClusterHandle | undefined;
  beforeAll(async () => {
    cluster = await startNatsCluster(size, options);
  });
  afterAll(async () => {
    await cluster?.stop();
  });
  return () => {
    if (!cluster) throw new Error('useNatsCluster(): the cluster is available only after beforeAll');
    return cluster;
  };
};

// ---------------------------------------------------------------------------------------
// Choosing the backend, once per test process

let backendChoice: Promise<NatsBackend> | undefined;

export const chooseBackend = (): Promise<NatsBackend> => {
  backendChoice ??= decideBackend();
  return backendChoice;
};

const decideBackend = async (): Promise<NatsBackend> => {
  const wanted = process.env[BACKEND_ENV] ?? 'auto';
  if (wanted === 'local') return 'local';
  if (wanted !== 'container' && wanted !== 'auto') {
    throw new Error(`${BACKEND_ENV}=${wanted} is not one of local, container, auto`);
  }
  // Asked for explicitly, testcontainers itself is asked, not only our list of likely places.
  const engine = await dockerEngine({ askEvenWithoutHints: wanted === 'container' });
  if (engine.answers) return 'container';
  if (wanted === 'container') {
    throw new Error(
      `${BACKEND_ENV}=container but no Docker engine answers: ${engine.reason}. ` +
        `Start a Docker engine, or use ${BACKEND_ENV}=local (a nats-server from \`bash scripts/ensure-nats.sh\`).`,
    );
  }
  return 'local';
};

/**
 * Where testcontainers looks for an engine. Checking them first spares every test file
 * the half second it takes to load testcontainers on machines without Docker.
 */
const engineHints = (): boolean => {
  if (Object.keys(process.env).some((key) => key === 'DOCKER_HOST' || key.startsWith('TESTCONTAINERS_')))
    return true;
  const home = homedir();
  const runtimeDir = process.env.XDG_RUNTIME_DIR;
  const candidates = [
    '/var/run/docker.sock',
    join(home, '.testcontainers.properties'),
    join(home, '.docker', 'run', 'docker.sock'),
    join(home, '.docker', 'desktop', 'docker.sock'),
    ...(runtimeDir ? [join(runtimeDir, 'docker.sock'), join(runtimeDir, 'podman', 'podman.sock')] : []),
  ];
  return candidates.some((path) => existsSync(path));
};

const dockerEngine = async (options: {
  readonly askEvenWithoutHints: boolean;
}): Promise<{ answers: true } | { answers: false; reason: string }> => {
  if (!options.askEvenWithoutHints && !engineHints()) {
    return { answers: false, reason: 'no DOCKER_HOST, no Docker socket, no ~/.testcontainers.properties' };
  }
  try {
    const { getContainerRuntimeClient } = await import('testcontainers');
    await withTimeout(getContainerRuntimeClient(), DOCKER_PROBE_TIMEOUT_MS, 'the engine did not answer');
    return { answers: true };
  } catch (error) {
    return { answers: false, reason: (error as Error).message };
  }
};

const withTimeout = async <T>(promise: Promise<T>, timeoutMs: number, what: string): Promise<T> => {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, fail) => {
    timer = setTimeout(() => fail(new Error(`${what} within ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
};

// ---------------------------------------------------------------------------------------
// The container backend (nats:2.10 through @testcontainers/nats)

/**
 * NatsContainer always passes --user/--pass, but the handles carry only a URL (as a real
 * deployment's services get), so the server here runs without authentication: the
 * command is replaced by our own, which still goes through NatsContainer's wait strategy
 * ("Server is ready") and exposed ports.
 */
const openNatsContainer = async (args: readonly string[]) => {
  const { NatsContainer, StartedNatsContainer } = await import('@testcontainers/nats');
  const { GenericContainer } = await import('testcontainers');
  class OpenNatsContainer extends NatsContainer {
    override async start(): Promise<StartedNatsContainer> {
      this.withCommand([...args]);
      const started = await GenericContainer.prototype.start.call(this);
      return new StartedNatsContainer(started, undefined, undefined);
    }
  }
  return new OpenNatsContainer(CONTAINER_IMAGE).withStartupTimeout(CONTAINER_STARTUP_TIMEOUT_MS);
};

const baseArgs = (serverName: string) => [
  '--jetstream',
  '--store_dir',
  CONTAINER_STORE_DIR,
  '--server_name',
  serverName,
  '--http_port',
  String(MONITOR_PORT),
];

/**
 * A running container as a NatsServerHandle. kill9() sends SIGKILL through the engine and
 * waits for the exit; restart() is `docker restart` of the same container, so the store
 * (in the container's own filesystem) survives, like a local restart on the same store
 * dir. The host port may change on a restart: url and port are read each time.
 */
const containerHandle = (
  container: StartedNatsContainer,
  serverName: string,
  clustered: boolean,
): NatsServerHandle => {
  let stopped = false;
  const url = () => `nats://${container.getHost()}:${container.getMappedPort(CLIENT_PORT)}`;
  const monitorUrl = () => `http://${container.getHost()}:${container.getMappedPort(MONITOR_PORT)}`;
  return {
    get url() {
      return url();
    },
    get port() {
      return container.getMappedPort(CLIENT_PORT);
    },
    storeDir: CONTAINER_STORE_DIR,
    pid: undefined,
    serverName,
    get monitorUrl() {
      return monitorUrl();
    },
    async kill9() {
      const { getContainerRuntimeClient } = await import('testcontainers');
      const client = await getContainerRuntimeClient();
      const raw = client.container.getById(container.getId());
      const state = await client.container.inspect(raw);
      if (!state.State.Running) return;
      await raw.kill({ signal: 'SIGKILL' });
      await withTimeout(
        raw.wait(),
        CONTAINER_KILL_WAIT_MS,
        `container ${serverName} did not exit after SIGKILL`,
      );
    },
    async restart() {
      await container.restart({ timeout: CONTAINER_STOP_GRACE_MS });
      // A cluster node is fully healthy only once caught up with peers that may be down too.
      await waitForHealthz(
        { url: url(), monitorUrl: monitorUrl() },
        { jetStreamOnly: clustered, timeoutMs: CONTAINER_READY_TIMEOUT_MS },
      );
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      await container.stop({ timeout: CONTAINER_STOP_GRACE_MS });
    },
  };
};

const startContainerNats = async (): Promise<NatsServerHandle> => {
  const serverName = 'nats-container';
  const container = await (await openNatsContainer(baseArgs(serverName))).start();
  const handle = containerHandle(container, serverName, false);
  try {
    await waitForHealthz(handle, { timeoutMs: CONTAINER_READY_TIMEOUT_MS });
  } catch (error) {
    await handle.stop();
    throw error;
  }
  return handle;
};

/**
 * A cluster of containers on a network of their own, routed by network alias (aliases
 * survive a container restart, addresses may not). --no_advertise keeps the servers from
 * gossiping in-network addresses that a client on the host cannot reach.
 */
const startContainerCluster = async (size: number): Promise<NatsClusterHandle> => {
  const { Network } = await import('testcontainers');
  const network: StartedNetwork = await new Network().start();
  const names = Array.from({ length: size }, (_, i) => `lease-n${i + 1}`);
  const routes = names.map((name) => `nats://${name}:${ROUTE_PORT}`).join(',');
  const started = await Promise.allSettled(
    names.map(async (name) => {
      const args = [
        ...baseArgs(name),
        '--cluster_name',
        'lease',
        '--cluster',
        `nats://0.0.0.0:${ROUTE_PORT}`,
        '--routes',
        routes,
        '--no_advertise',
      ];
      const container = await (await openNatsContainer(args))
        .withNetwork(network)
        .withNetworkAliases(name)
        .start();
      return containerHandle(container, name, true);
    }),
  );
  const nodes = started.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
  const stop = async () => {
    await Promise.allSettled(nodes.map((node) => node.stop()));
    await network.stop();
  };
  const failed = started.find((result) => result.status === 'rejected');
  if (failed) {
    await stop();
    throw failed.reason;
  }
  const cluster: NatsClusterHandle = {
    get urls() {
      return nodes.map((node) => node.url);
    },
    nodes,
    waitHealthy: (timeoutMs) => waitForClusterReady(nodes, timeoutMs),
    stop,
  };
  try {
    await cluster.waitHealthy(CONTAINER_READY_TIMEOUT_MS);
  } catch (error) {
    await stop();
    throw error;
  }
  return cluster;
};
