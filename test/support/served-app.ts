/** The real app on a real port, for a test file whose client is not in-process (a browser). */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startTestApp, type TestApp } from './app.js';

export interface ServedApp {
  /** The app and its database, for setup and checks through the API. */
  t: TestApp;
  /** `http://127.0.0.1:<port>`. */
  base: string;
}

/**
 * Starts the app and serves it on a free port before the file's tests, and stops both after them.
 * Call it at the top level of the file (it registers hooks); read the fields inside tests.
 */
export function servedApp(): ServedApp {
  const served = {} as ServedApp;
  let server: Server | undefined;
  beforeAll(async () => {
    served.t = await startTestApp();
    const listening = createServer(served.t.app.yoga);
    await new Promise<void>((resolve) => listening.listen(0, '127.0.0.1', resolve));
    server = listening;
    served.base = `http://127.0.0.1:${(listening.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    if (server) await new Promise((resolve) => server!.close(resolve));
    await served.t?.close();
  });
  return served;
}
