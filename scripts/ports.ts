// Ports for the processes the benches and tests start, and proof that the process asked to listen
// is the one listening.
//
// A port found free and handed to a child stays free only until someone else binds it. Ports
// from the kernel's ephemeral range are what every listen(0) and every outgoing connection on the
// machine takes, and tests start services and open connections by the thousand while a child
// reads its database for seconds before it binds. When another process took the port in that
// window, the child failed to bind, and its readiness poll was answered by the other process
// (CI, 2026-11-29: a bench's service "ready", then ECONNREFUSED once the other service stopped).
// So ports are chosen below that range, where only pickers like this one go, at random.
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { createServer } from 'node:net';

/** The lowest port chosen: above the ports services commonly take (PostgreSQL's, 8000, 9464). */
const LOWEST_PORT = 15_000;

/** The kernel's ephemeral range's first port (Linux; the IANA range's elsewhere). */
function ephemeralRangeStart(): number {
  try {
    const [low] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
    if (low > LOWEST_PORT + 1000) return low;
  } catch {
    // Not Linux: the IANA dynamic range.
  }
  return 49_152;
}

function canListen(port: number, host: string): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, host, () => server.close(() => resolve(true)));
  });
}

/** A port no process listens on now, below the ephemeral range, for a child to listen on. */
export async function freePort(host = '127.0.0.1'): Promise<number> {
  const end = ephemeralRangeStart();
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = LOWEST_PORT + Math.floor(Math.random() * (end - LOWEST_PORT));
    if (await canListen(port, host)) return port;
  }
  throw new Error(`no free port between ${LOWEST_PORT} and ${end} in 100 tries`);
}

/** The inodes of the TCP sockets listening on `port` (Linux's /proc/net/tcp and tcp6). */
function listeningInodes(port: number): Set<string> {
  const inodes = new Set<string>();
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let lines: string[];
    try {
      lines = readFileSync(table, 'utf8').split('\n').slice(1);
    } catch {
      continue;
    }
    for (const line of lines) {
      // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
      const fields = line.trim().split(/\s+/);
      if (fields.length > 9 && fields[1].endsWith(`:${hexPort}`) && fields[3] === '0A') inodes.add(fields[9]);
    }
  }
  return inodes;
}

/**
 * Whether process `pid` holds the socket listening on `port`: a readiness answer on that port is
 * then its own. Undefined where /proc cannot tell (not Linux).
 */
export function listensOn(pid: number, port: number): boolean | undefined {
  let descriptors: string[];
  try {
    descriptors = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return readdirOk() ? false : undefined;
  }
  const inodes = listeningInodes(port);
  return descriptors.some((fd) => {
    try {
      const target = readlinkSync(`/proc/${pid}/fd/${fd}`);
      return target.startsWith('socket:[') && inodes.has(target.slice(8, -1));
    } catch {
      return false;
    }
  });
}

/** Whether this system has /proc/<pid>/fd at all (so a missing one means the process is gone). */
function readdirOk(): boolean {
  try {
    readdirSync(`/proc/${process.pid}/fd`);
    return true;
  } catch {
    return false;
  }
}
