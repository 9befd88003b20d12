/** The copied development-stage conventions (src/observability/semantic-conventions.ts) are the package's. */
import * as incubating from '@opentelemetry/semantic-conventions/incubating';
import * as copied from '../../src/observability/semantic-conventions.js';

test.each(Object.entries(copied))('%s is the incubating entry point’s value', (name, value) => {
  expect((incubating as Record<string, unknown>)[name]).toBe(value);
});
