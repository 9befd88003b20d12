/**
 * Debian's Firefox ESR driven over WebDriver BiDi, the W3C protocol Firefox ships built in.
 * playwright-core drives only its own patched Firefox, or a newer stock one than Debian's ESR
 * (its BiDi client sends commands ESR does not know), so the console's Firefox test speaks the
 * few commands it needs itself: open a session, navigate, evaluate a script.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import WebSocket from 'ws';
import { optionalProgram } from './optional-programs.js';

/**
 * Debian's Firefox ESR, or FIREFOX_PATH; undefined, after a notice, when there is none (the browser
 * tests are skipped then, except under CI).
 */
export function findFirefox(): string | undefined {
  return optionalProgram('Firefox', ['/usr/bin/firefox-esr', '/usr/bin/firefox'], 'apt-get install firefox-esr', {
    variable: 'FIREFOX_PATH',
    value: process.env.FIREFOX_PATH,
  });
}

/** Waits for `promise`, at most `ms` (and leaves no timer behind). */
async function within(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([promise, new Promise((resolve) => (timer = setTimeout(resolve, ms)))]);
  clearTimeout(timer);
}

interface Pending {
  resolve(result: any): void;
  reject(error: Error): void;
}

export class FirefoxPage {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();

  private constructor(
    private readonly firefox: ChildProcess,
    private readonly profile: string,
    private readonly socket: WebSocket,
    private context = '',
  ) {
    socket.on('message', (data) => {
      const message = JSON.parse(String(data));
      const waiting = message.id !== undefined ? this.pending.get(message.id) : undefined;
      if (!waiting) return;
      this.pending.delete(message.id);
      if (message.type === 'error') waiting.reject(new Error(`${message.error}: ${message.message}`));
      else waiting.resolve(message.result);
    });
  }

  /** Starts a headless Firefox with a fresh profile and opens a BiDi session on its first tab. */
  static async launch(executable: string): Promise<FirefoxPage> {
    const profile = mkdtempSync(path.join(tmpdir(), 'agw-firefox-'));
    // A process group of its own: closing kills Firefox's content processes with it.
    const firefox = spawn(
      executable,
      ['--headless', '--no-remote', '--profile', profile, '--remote-debugging-port', '0'],
      {
        stdio: ['ignore', 'ignore', 'pipe'],
        detached: true,
      },
    );
    const endpoint = await new Promise<string>((resolve, reject) => {
      let seen = '';
      const timer = setTimeout(() => reject(new Error(`Firefox did not offer WebDriver BiDi:\n${seen}`)), 60_000);
      firefox.stderr!.on('data', (chunk: Buffer) => {
        seen += chunk.toString();
        const match = /WebDriver BiDi listening on (ws:\/\/\S+)/.exec(seen);
        if (match) {
          clearTimeout(timer);
          resolve(match[1]);
        }
      });
      firefox.once('exit', (code) =>
        reject(new Error(`Firefox exited (${code}) before offering WebDriver BiDi:\n${seen}`)),
      );
    });
    const socket = new WebSocket(`${endpoint}/session`);
    await new Promise((resolve, reject) => socket.once('open', resolve).once('error', reject));
    const page = new FirefoxPage(firefox, profile, socket);
    await page.send('session.new', { capabilities: {} });
    const tree = await page.send('browsingContext.getTree', {});
    page.context = tree.contexts[0].context;
    return page;
  }

  private send(method: string, params: Record<string, unknown>): Promise<any> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.socket.send(JSON.stringify({ id, method, params }));
    });
  }

  async goto(url: string): Promise<void> {
    await this.send('browsingContext.navigate', { context: this.context, url, wait: 'complete' });
  }

  /** The value of a script expression in the page (awaited when it is a promise), as JSON. */
  async evaluate<T>(expression: string): Promise<T> {
    const result = await this.send('script.evaluate', {
      expression: `(async () => JSON.stringify(await (${expression})))()`,
      target: { context: this.context },
      awaitPromise: true,
    });
    if (result.type === 'exception') throw new Error(`the page's script threw: ${result.exceptionDetails?.text}`);
    return JSON.parse(result.result.value) as T;
  }

  async close(): Promise<void> {
    await this.send('session.end', {}).catch(() => undefined);
    const socketClosed = new Promise((resolve) => this.socket.once('close', resolve));
    this.socket.close();
    await within(socketClosed, 2000);
    const exited = new Promise((resolve) => this.firefox.once('exit', resolve));
    const signalGroup = (signal: NodeJS.Signals) => {
      try {
        process.kill(-this.firefox.pid!, signal);
      } catch {
        // already gone
      }
    };
    signalGroup('SIGTERM');
    await within(exited, 5000);
    if (this.firefox.exitCode === null && this.firefox.signalCode === null) signalGroup('SIGKILL');
    this.firefox.stderr?.destroy();
    rmSync(this.profile, { recursive: true, force: true });
  }
}
