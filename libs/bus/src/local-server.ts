import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { accessSync, constants as fsConstants, rmSync, statSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { type AddressInfo, createServer, connect as tcpConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { assertServerVersion, MIN_NATS_SERVER_VERSION } from './server-version.js';

/**
 * Running a nats-server on this machine, for the tests and for the demo. Only loopback is
 * used: these servers have no authentication, so they must not be reachable from elsewhere.
 */

const LOOPBACK = '127.0.0.1';
const READY_TIMEOUT_MS = 10_000;
const CLUSTER_READY_TIMEOUT_MS = 20_000;
const POLL_INTERVAL_MS = 50;
const PROBE_TIMEOUT_MS = 1_000;
const STOP_GRACE_MS = 5_000;
const EXIT_WAIT_MS = 5_000;
const VERSION_PROBE_TIMEOUT_MS = 5_000;
const OUTPUT_TAIL_LINES = 40;
const REPO_WALK_LEVELS_MAX = 12;
/** A free port can be taken by someone else between finding it and the server binding it. */
const START_ATTEMPTS_MAX = 3;
const CLUSTER_SIZE_MAX = 9;
const CONFIG_FILE_NAME = 'nats-server.conf';
const ENSURE_SCRIPT = join('scripts', 'ensure-nats.sh');
const PROJECT_BINARY = join('.tools', 'nats-server', 'pkg', 'usr', 'sbin', 'nats-server');

/** What the tests and the demo hold on to; the container backend of the harness has the same shape. */
export interface NatsServerHandle {
  /** nats://host:port, to connect a client. */
  readonly url: string;
  readonly port: number;
  /** The JetStream store; kept across kill9() and restart(). */
  readonly storeDir: string;
  /** undefined while the server is down, and on backends without a local process. */
  readonly pid: number | undefined;
  readonly serverName: string;
  /** http://host:port of the monitoring endpoints (/healthz, /jsz). */
  readonly monitorUrl: string;
  /** Simulates a crash: SIGKILL, no chance to flush or say goodbye. */
  kill9(): Promise<void>;
  /** Stops the server if it runs, then starts it again on the same ports and the same store. */
  restart(): Promise<void>;
  /** SIGTERM, then SIGKILL after a bound; removes the store when this module created it. Idempotent. */
  stop(): Promise<void>;
}

export interface LocalClusterSettings {
  readonly name: string;
  /** The route port of this node; a free one when omitted. */
  readonly port?: number;
  /** Route URLs of the cluster's nodes (this node's own may be among them). */
  readonly routes: readonly string[];
}

export interface LocalNatsOptions {
  /** Client port; a free one when omitted. */
  readonly port?: number;
  /** A fresh temporary folder (removed by stop()) when omitted. */
  readonly storeDir?: string;
  /** fsync every write before acknowledging it (`sync_interval: always`), as the deploy configs do. */
  readonly syncAlways?: boolean;
  readonly serverName?: string;
  readonly cluster?: LocalClusterSettings;
  readonly readyTimeoutMs?: number;
}

export interface NatsClusterHandle {
  readonly urls: readonly string[];
  readonly nodes: readonly NatsServerHandle[];
  /** Waits until every node agrees on a meta leader and reports itself healthy (streams current). */
  waitHealthy(timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

export interface LocalClusterOptions {
  readonly size: number;
  readonly name?: string;
  readonly syncAlways?: boolean;
  readonly readyTimeoutMs?: number;
}

// ---------------------------------------------------------------------------------------
// Finding a binary

const binaryCache = new Map<string, string>();

/**
 * The nats-server to run: $NATS_SERVER_BIN when set (an explicit choice that fails loudly
 * when unusable), else the project's copy in .tools/, else the first on the PATH; each
 * must be at least MIN_NATS_SERVER_VERSION. The order is the one of scripts/ensure-nats.sh.
 */
export const findNatsServerBinary = (): string => {
  const explicit = process.env.NATS_SERVER_BIN ?? '';
  const cached = binaryCache.get(explicit);
  if (cached) return cached;
  const found = explicit ? checkedExplicitBinary(explicit) : searchBinary();
  binaryCache.set(explicit, found);
  return found;
};

const HOW_TO_GET_ONE =
  `Run \`bash scripts/ensure-nats.sh\` (it installs nats-server >= ${MIN_NATS_SERVER_VERSION} into ` +
  '.tools/ and prints its path), or point NATS_SERVER_BIN at a recent enough nats-server.';

const checkedExplicitBinary = (path: string): string => {
  const problem = binaryProblem(path);
  if (problem) {
    throw new Error(
      `NATS_SERVER_BIN=${path} cannot be used: ${problem.replace(/\.$/, '')}. ${HOW_TO_GET_ONE}`,
    );
  }
  return path;
};

const searchBinary = (): string => {
  const rejected: string[] = [];
  const root = findProjectRoot();
  const candidates = [...(root ? [join(root, PROJECT_BINARY)] : []), ...onPath('nats-server')];
  for (const candidate of candidates) {
    const problem = binaryProblem(candidate);
    if (!problem) return candidate;
    rejected.push(`${candidate}: ${problem}`);
  }
  const looked =
    rejected.length > 0 ? `found only: ${rejected.join('; ')}` : 'none in .tools/ or on the PATH';
  throw new Error(`no nats-server >= ${MIN_NATS_SERVER_VERSION} was found (${looked}). ${HOW_TO_GET_ONE}`);
};

/** Why a binary cannot be used, or undefined when it can. */
const binaryProblem = (path: string): string | undefined => {
  if (!isExecutableFile(path)) return 'not an executable file';
  let output: string;
  try {
    output = execFileSync(path, ['--version'], { encoding: 'utf8', timeout: VERSION_PROBE_TIMEOUT_MS });
  } catch (error) {
    return `\`${path} --version\` failed: ${(error as Error).message}`;
  }
  const version = /v?(\d+\.\d+\.\d+)/.exec(output)?.[1];
  if (!version) return `cannot read a version from ${JSON.stringify(output.trim())}`;
  try {
    assertServerVersion(version);
  } catch (error) {
    return (error as Error).message;
  }
  return undefined;
};

const isExecutableFile = (path: string): boolean => {
  try {
    accessSync(path, fsConstants.X_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
};

const onPath = (name: string): string[] =>
  (process.env.PATH ?? '')
    .split(delimiter)
    .filter((dir) => dir !== '')
    .map((dir) => join(dir, name))
    .filter(isExecutableFile);

/** The folder holding scripts/ensure-nats.sh, found from this file whether it runs from src/ or dist/. */
const findProjectRoot = (): string | undefined => {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let level = 0; level < REPO_WALK_LEVELS_MAX; level++) {
    if (isFile(join(dir, ENSURE_SCRIPT))) return dir;
    const parent = dirname(dir);
    if (parent === dir) return undefined;
    dir = parent;
  }
  return undefined;
};

const isFile = (path: string): boolean => {
  try {
    return statSync(path).isFile();
  } catch {
    return false;
  }
};

// ---------------------------------------------------------------------------------------
// Ports, polling, process bookkeeping

/** Distinct free loopback ports: all are held open at once so that one call never repeats a port. */
export const findFreePorts = async (count: number): Promise<number[]> => {
  const servers = await Promise.all(
    Array.from({ length: count }, async () => {
      const server = createServer();
      await new Promise<void>((done, fail) => {
        server.once('error', fail);
        server.listen(0, LOOPBACK, () => done());
      });
      return server;
    }),
  );
  const ports = servers.map((server) => (server.address() as AddressInfo).port);
  await Promise.all(servers.map((server) => new Promise((done) => server.close(done))));
  return ports;
};

const sleep = (ms: number) => new Promise<void>((done) => setTimeout(done, ms));

/**
 * Calls `attempt` until it returns a value, bounded in both time and count. `attempt`
 * returns undefined for "not yet", or throws to give up at once.
 */
const pollUntil = async <T>(
  what: string,
  timeoutMs: number,
  attempt: () => Promise<T | undefined>,
  lastProblem: () => string = () => '',
): Promise<T> => {
  const deadline = Date.now() + timeoutMs;
  const attemptsMax = Math.ceil(timeoutMs / POLL_INTERVAL_MS) + 1;
  for (let i = 0; i < attemptsMax && Date.now() <= deadline; i++) {
    const value = await attempt();
    if (value !== undefined) return value;
    await sleep(POLL_INTERVAL_MS);
  }
  const detail = lastProblem();
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${detail ? `: ${detail}` : ''}`);
};

const httpGetJson = async (url: string): Promise<{ status: number; body: unknown } | undefined> => {
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(PROBE_TIMEOUT_MS) });
    return { status: response.status, body: await response.json() };
  } catch {
    return undefined;
  }
};

const tcpAccepts = (host: string, port: number): Promise<boolean> =>
  new Promise((done) => {
    const socket = tcpConnect({ host, port, timeout: PROBE_TIMEOUT_MS });
    const finish = (ok: boolean) => {
      socket.destroy();
      done(ok);
    };
    socket.once('connect', () => finish(true));
    socket.once('timeout', () => finish(false));
    socket.once('error', () => finish(false));
  });

/**
 * Waits until /healthz answers 200 (with `?js-enabled-only=true` when jetStreamOnly) and
 * the client port accepts connections. Full /healthz also means every stream is recovered
 * and, in a cluster, current with its leader.
 */
export const waitForHealthz = async (
  server: { readonly monitorUrl: string; readonly url: string },
  options: {
    readonly jetStreamOnly?: boolean;
    readonly timeoutMs?: number;
    readonly alive?: () => string | undefined;
  } = {},
): Promise<void> => {
  const path = options.jetStreamOnly ? '/healthz?js-enabled-only=true' : '/healthz';
  const client = new URL(server.url);
  let last = 'no answer yet';
  await pollUntil(
    `${server.monitorUrl}${path} and ${server.url}`,
    options.timeoutMs ?? READY_TIMEOUT_MS,
    async () => {
      const dead = options.alive?.();
      if (dead) throw new Error(dead);
      const health = await httpGetJson(`${server.monitorUrl}${path}`);
      if (health?.status !== 200) {
        last = health
          ? `healthz ${health.status} ${JSON.stringify(health.body)}`
          : 'monitor port not answering';
        return undefined;
      }
      if (!(await tcpAccepts(client.hostname, Number(client.port)))) {
        last = 'client port not accepting';
        return undefined;
      }
      return true;
    },
    () => last,
  );
};

/**
 * Children still running when this process exits are killed, and the temporary stores
 * made here removed, so that a failed test run or a crashed demo leaves nothing behind.
 * 'exit' handlers must be synchronous: SIGKILL and rmSync are.
 */
const liveChildren = new Set<ChildProcess>();
const temporaryStores = new Set<string>();
let exitHookInstalled = false;

const cleanUpAtExit = (): void => {
  for (const running of liveChildren) running.kill('SIGKILL');
  for (const dir of temporaryStores) {
    try {
      rmSync(dir, { recursive: true, force: true });
    } catch {
      // Best effort: a dying server may still be writing into it.
    }
  }
};

const installExitHook = (): void => {
  if (exitHookInstalled) return;
  process.on('exit', cleanUpAtExit);
  exitHookInstalled = true;
};

const track = (child: ChildProcess): void => {
  installExitHook();
  liveChildren.add(child);
  child.once('exit', () => liveChildren.delete(child));
};

const makeTemporaryStore = async (): Promise<string> => {
  installExitHook();
  const dir = await mkdtemp(join(tmpdir(), 'nats-store-'));
  temporaryStores.add(dir);
  return dir;
};

const removeTemporaryStore = async (dir: string): Promise<void> => {
  await rm(dir, { recursive: true, force: true });
  temporaryStores.delete(dir);
};

// ---------------------------------------------------------------------------------------
// One server

interface ServerSettings {
  readonly binary: string;
  readonly serverName: string;
  readonly port: number;
  readonly monitorPort: number;
  readonly storeDir: string;
  readonly syncAlways: boolean;
  readonly cluster: (LocalClusterSettings & { readonly port: number }) | undefined;
  readonly readyTimeoutMs: number;
}

const quote = (value: string) => JSON.stringify(value);

/** A config file rather than flags: it shows what ran, and `sync_interval` has no flag. */
const renderConfig = (settings: ServerSettings): string => {
  const lines = [
    `server_name: ${quote(settings.serverName)}`,
    `listen: ${quote(`${LOOPBACK}:${settings.port}`)}`,
    `http: ${quote(`${LOOPBACK}:${settings.monitorPort}`)}`,
    'jetstream {',
    `  store_dir: ${quote(settings.storeDir)}`,
    ...(settings.syncAlways ? ['  sync_interval: always'] : []),
    '}',
  ];
  if (settings.cluster) {
    lines.push(
      'cluster {',
      `  name: ${quote(settings.cluster.name)}`,
      `  listen: ${quote(`${LOOPBACK}:${settings.cluster.port}`)}`,
      `  routes: [${settings.cluster.routes.map(quote).join(', ')}]`,
      '}',
    );
  }
  return `${lines.join('\n')}\n`;
};

class LocalNatsServer implements NatsServerHandle {
  readonly url: string;
  readonly monitorUrl: string;
  #child: ChildProcess | undefined;
  #exited: Promise<void> = Promise.resolve();
  #outputTail: string[] = [];
  #stopped = false;
  readonly #settings: ServerSettings;
  readonly #ownsStoreDir: boolean;

  constructor(settings: ServerSettings, ownsStoreDir: boolean) {
    this.#settings = settings;
    this.#ownsStoreDir = ownsStoreDir;
    this.url = `nats://${LOOPBACK}:${settings.port}`;
    this.monitorUrl = `http://${LOOPBACK}:${settings.monitorPort}`;
  }

  get port() {
    return this.#settings.port;
  }
  get storeDir() {
    return this.#settings.storeDir;
  }
  get serverName() {
    return this.#settings.serverName;
  }
  get pid() {
    return this.#running() ? this.#child?.pid : undefined;
  }
  get configPath() {
    return join(this.#settings.storeDir, CONFIG_FILE_NAME);
  }

  async start(): Promise<void> {
    if (this.#stopped) throw new Error(`nats-server ${this.serverName} was stopped; start a new one`);
    this.#outputTail = [];
    const child = spawn(this.#settings.binary, ['-c', this.configPath], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.#child = child;
    track(child);
    let spawnError: Error | undefined;
    child.once('error', (error) => {
      spawnError = error;
    });
    this.#exited = new Promise((done) => {
      // 'close' rather than 'exit': by then the last of its output has been read.
      child.once('close', () => done());
      child.once('error', () => done());
    });
    // The pipes must be drained or a chatty server blocks on a full pipe.
    child.stdout?.on('data', (chunk: Buffer) => this.#remember(chunk));
    child.stderr?.on('data', (chunk: Buffer) => this.#remember(chunk));
    try {
      await waitForHealthz(this, {
        // A cluster node alone cannot be fully healthy until its peers are up: the cluster waits for that.
        jetStreamOnly: this.#settings.cluster !== undefined,
        timeoutMs: this.#settings.readyTimeoutMs,
        alive: () => {
          if (spawnError) return `cannot run ${this.#settings.binary}: ${spawnError.message}`;
          if (child.exitCode !== null || child.signalCode !== null) {
            return `nats-server exited (${child.exitCode ?? child.signalCode})`;
          }
          return undefined;
        },
      });
    } catch (error) {
      // The reason it did not start matters more than a failure to kill it.
      await this.kill9().catch(() => undefined);
      throw new Error(
        `nats-server ${this.serverName} (${this.url}, config ${this.configPath}) did not become ready: ` +
          `${(error as Error).message}\n--- last output ---\n${this.outputTail()}`,
      );
    }
  }

  /** The last lines the server wrote, for error messages. */
  outputTail(): string {
    return this.#outputTail.join('\n');
  }

  async kill9(): Promise<void> {
    if (!(await this.#signalAndWait('SIGKILL', EXIT_WAIT_MS))) {
      throw new Error(`nats-server ${this.serverName} (pid ${this.#child?.pid}) did not exit after SIGKILL`);
    }
  }

  async restart(): Promise<void> {
    await this.#terminate();
    await this.start();
  }

  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    await this.#terminate();
    if (this.#ownsStoreDir) await removeTemporaryStore(this.#settings.storeDir);
  }

  async #terminate(): Promise<void> {
    if (await this.#signalAndWait('SIGTERM', STOP_GRACE_MS)) return;
    await this.kill9();
  }

  /** True when the process is gone within the bound (or was not running). */
  async #signalAndWait(signal: NodeJS.Signals, boundMs: number): Promise<boolean> {
    const child = this.#child;
    if (!child || !this.#running()) return true;
    child.kill(signal);
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<boolean>((done) => {
      timer = setTimeout(() => done(false), boundMs);
    });
    const exited = await Promise.race([this.#exited.then(() => true), timedOut]);
    clearTimeout(timer);
    return exited;
  }

  #running(): boolean {
    const child = this.#child;
    return (
      child !== undefined && child.exitCode === null && child.signalCode === null && child.pid !== undefined
    );
  }

  #remember(chunk: Buffer): void {
    const lines = chunk
      .toString('utf8')
      .split('\n')
      .filter((line) => line !== '');
    this.#outputTail.push(...lines);
    if (this.#outputTail.length > OUTPUT_TAIL_LINES)
      this.#outputTail.splice(0, this.#outputTail.length - OUTPUT_TAIL_LINES);
  }
}

const isPortTaken = (error: unknown) => /address already in use/i.test((error as Error).message);

/**
 * Starts a nats-server with JetStream on 127.0.0.1 and resolves once it is ready to serve
 * (JetStream enabled and, outside a cluster, every stream recovered).
 */
export const startLocalNats = async (options: LocalNatsOptions = {}): Promise<NatsServerHandle> => {
  const binary = findNatsServerBinary();
  const ownsStoreDir = options.storeDir === undefined;
  const storeDir = resolve(options.storeDir ?? (await makeTemporaryStore()));
  try {
    await mkdir(storeDir, { recursive: true });
    for (let attempt = 1; ; attempt++) {
      const [port, monitorPort, clusterPort] = await findFreePorts(3);
      const settings: ServerSettings = {
        binary,
        serverName: options.serverName ?? `nats-${options.port ?? port}`,
        port: options.port ?? port!,
        monitorPort: monitorPort!,
        storeDir,
        syncAlways: options.syncAlways ?? false,
        cluster: options.cluster
          ? { ...options.cluster, port: options.cluster.port ?? clusterPort! }
          : undefined,
        readyTimeoutMs: options.readyTimeoutMs ?? READY_TIMEOUT_MS,
      };
      const server = new LocalNatsServer(settings, ownsStoreDir);
      await writeFile(server.configPath, renderConfig(settings));
      try {
        await server.start();
        return server;
      } catch (error) {
        // Only ports this function chose can be chosen again.
        const portsWereOurs = options.port === undefined && options.cluster?.port === undefined;
        if (!isPortTaken(error) || !portsWereOurs || attempt >= START_ATTEMPTS_MAX) throw error;
      }
    }
  } catch (error) {
    if (ownsStoreDir) await removeTemporaryStore(storeDir);
    throw error;
  }
};

// ---------------------------------------------------------------------------------------
// A cluster

interface JszMeta {
  readonly meta_cluster?: { readonly leader?: string; readonly cluster_size?: number };
}

/**
 * Waits until every node names the same JetStream meta leader, sees the whole cluster, and
 * answers a full /healthz (so replicated streams are current on it after a restart).
 */
export const waitForClusterReady = async (
  nodes: readonly NatsServerHandle[],
  timeoutMs: number = CLUSTER_READY_TIMEOUT_MS,
): Promise<void> => {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  await pollUntil(
    `a JetStream meta leader seen by all ${nodes.length} nodes`,
    timeoutMs,
    async () => {
      const views = await Promise.all(nodes.map((node) => httpGetJson(`${node.monitorUrl}/jsz`)));
      const leaders = views.map((view) => (view?.body as JszMeta | undefined)?.meta_cluster);
      last = `meta views ${JSON.stringify(leaders)}`;
      const leader = leaders[0]?.leader;
      const agreed = leaders.every(
        (meta) => meta?.leader && meta.leader === leader && meta.cluster_size === nodes.length,
      );
      return agreed ? true : undefined;
    },
    () => last,
  );
  await Promise.all(
    nodes.map((node) =>
      waitForHealthz(node, { timeoutMs: Math.max(deadline - Date.now(), POLL_INTERVAL_MS) }),
    ),
  );
};

/**
 * Starts `size` nodes on loopback, routed to each other, each with its own store, and
 * resolves once the cluster has a meta leader (so a replicated stream can be created).
 */
export const startLocalCluster = async (options: LocalClusterOptions): Promise<NatsClusterHandle> => {
  if (!Number.isInteger(options.size) || options.size < 1 || options.size > CLUSTER_SIZE_MAX) {
    throw new Error(`a local cluster has 1 to ${CLUSTER_SIZE_MAX} nodes, not ${options.size}`);
  }
  for (let attempt = 1; ; attempt++) {
    try {
      return await startClusterOnce(options);
    } catch (error) {
      // A port taken between finding and binding it, or (seen on a loaded 2-core machine) a
      // meta group that formed without one node: both are cured by a fresh start.
      if (attempt >= START_ATTEMPTS_MAX) throw error;
    }
  }
};

const startClusterOnce = async (options: LocalClusterOptions): Promise<NatsClusterHandle> => {
  const name = options.name ?? 'lease';
  const ports = await findFreePorts(options.size * 2);
  const clientPorts = ports.slice(0, options.size);
  const routePorts = ports.slice(options.size);
  const routes = routePorts.map((port) => `nats://${LOOPBACK}:${port}`);
  // Started together: each node waits for nothing but itself, the cluster forms after.
  const started = await Promise.allSettled(
    clientPorts.map((port, i) =>
      startLocalNats({
        port,
        serverName: `${name}-n${i + 1}`,
        syncAlways: options.syncAlways,
        cluster: { name, port: routePorts[i], routes },
        readyTimeoutMs: options.readyTimeoutMs,
      }),
    ),
  );
  const nodes = started.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
  const stop = async () => {
    await Promise.all(nodes.map((node) => node.stop()));
  };
  const failed = started.find((result) => result.status === 'rejected');
  if (failed) {
    await stop();
    throw failed.reason;
  }
  const cluster: NatsClusterHandle = {
    urls: nodes.map((node) => node.url),
    nodes,
    waitHealthy: (timeoutMs) => waitForClusterReady(nodes, timeoutMs),
    stop,
  };
  try {
    await cluster.waitHealthy(options.readyTimeoutMs ?? CLUSTER_READY_TIMEOUT_MS);
  } catch (error) {
    await stop();
    throw error;
  }
  return cluster;
};
