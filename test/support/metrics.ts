/** The Prometheus exposition format, read back: what the tests assert metrics with. */
import type { PasswordOperation } from '../../src/observability/telemetry.js';
import type { TestApp } from './app.js';

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export function parseExposition(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match) throw new Error(`not an exposition line: ${line}`);
    const labels: Record<string, string> = {};
    for (const [, name, value] of (match[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
      labels[name] = value;
    samples.push({ name: match[1], labels, value: Number(match[3]) });
  }
  return samples;
}

/** The value of the sample with exactly these labels (0 when absent: nothing counted yet). */
export function sampleValue(samples: Sample[], name: string, labels: Record<string, string> = {}): number {
  const wanted = Object.entries(labels);
  const found = samples.filter(
    (s) =>
      s.name === name && Object.keys(s.labels).length === wanted.length && wanted.every(([k, v]) => s.labels[k] === v),
  );
  if (found.length > 1) throw new Error(`several samples of ${name} ${JSON.stringify(labels)}`);
  return found[0]?.value ?? 0;
}

/** How much each listed series moved between two scrapes. */
export const delta = (before: Sample[], after: Sample[], name: string, labels: Record<string, string> = {}) =>
  sampleValue(after, name, labels) - sampleValue(before, name, labels);

/**
 * How many argon2 computations of this kind the app has run (`agw_password_hashes_total`): the
 * proof that a refused login or sign-up did no password work. Needs metrics on (the default).
 */
export async function passwordHashes(t: TestApp, operation: PasswordOperation): Promise<number> {
  if (!t.app.telemetry.metricsEnabled) throw new Error('passwordHashes needs metrics (METRICS_PORT not 0)');
  return sampleValue(parseExposition((await t.app.telemetry.scrape()).text), 'agw_password_hashes_total', {
    operation,
  });
}
