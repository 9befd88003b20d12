/**
 * The ports the benches and tests give the services they start (scripts/ports.ts): chosen where no
 * listen(0) or outgoing connection goes, and readiness that counts only when the child itself
 * holds the port.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { freePort, listensOn } from '../scripts/ports.js';
import { killAllServices, startService, waitReady } from './support/service-process.js';

const listen = (server: Server, port: number) =>
  new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });

afterAll(killAllServices);

test('freePort: a port below the kernel ephemeral range that can be listened on', async () => {
  const ephemeralStart = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
  const ports = await Promise.all(Array.from({ length: 20 }, () => freePort()));
  for (const port of ports) {
    expect(port).toBeGreaterThanOrEqual(15_000);
    expect(port).toBeLessThan(ephemeralStart);
  }
  // Chosen at random, not the same one each time: concurrent pickers rarely meet.
  expect(new Set(ports).size).toBeGreaterThan(15);
  const server = createServer();
  await listen(server, ports[0]);
  server.close();
});

test('listensOn: true for the process holding the listening socket, false for any other', async () => {
  const port = await freePort();
  const child = spawn(process.execPath, [
    '-e',
    `require('node:net').createServer().listen(${port}, '127.0.0.1', () => console.log('up'))`,
  ]);
  try {
    await new Promise((resolve) => child.stdout.once('data', resolve));
    expect(listensOn(child.pid!, port)).toBe(true);
    expect(listensOn(process.pid, port)).toBe(false);
    expect(listensOn(child.pid!, port === 15_000 ? 15_001 : port - 1)).toBe(false);
  } finally {
    child.kill('SIGKILL');
  }
  await new Promise((resolve) => child.once('exit', resolve));
  // Gone: no /proc entry, so not listening.
  expect(listensOn(child.pid!, port)).toBe(false);
});

test('waitReady: another process answering /readyz 200 on the service port is not the service being ready', async () => {
  const port = await freePort();
  // Takes the port first and answers every request with 200, as another test's service would.
  const impostor = createServer((_request, response) => response.writeHead(200).end('{"status":"ok"}'));
  await listen(impostor, port);
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'agw-ports-'));
  try {
    const service = startService(port, { dataDir });
    // The service cannot bind and exits; before this check, the impostor's 200 made it "ready".
    await expect(waitReady(service)).rejects.toThrow(/service exited \(code 1/);
    expect(service.output()).toMatch(/EADDRINUSE|address already in use/);
  } finally {
    impostor.close();
    await rm(dataDir, { recursive: true, force: true });
  }
}, 120_000);
